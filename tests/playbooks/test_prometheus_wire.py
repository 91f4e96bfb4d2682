"""A range answer's points, cut out of the answer and read as numbers, are those the parsed answer gave."""

from __future__ import annotations

import json
import math

import httpx

from playbooks._prometheus_wire import _floats, cut_values, load_answer
from playbooks.prometheus import PrometheusClient

#: labels that hold the key and the end of an array inside their strings, points Prometheus writes as
#: strings that are no JSON numbers (NaN, +Inf), numbers orjson does not hold (an integer of 301 digits),
#: the digits of a value no shorter form gives back, a series without points, and a native histogram
ANSWER = {
    "status": "success",
    "data": {
        "resultType": "matrix",
        "result": [
            {"metric": {"host": 'a"values":[[1,"2"]]', "gpu": "0\\"}, "values": [[10, "61.5"], [70.5, "62"]]},
            {"metric": {"host": "b]]", "gpu": "1"}, "values": [[10, "NaN"], [70, "+Inf"], [130, "-Inf"]]},
            {"metric": {"host": "c"}, "values": [[10, "1" + "0" * 300], [70, "0.30000000000000004"]]},
            {"metric": {"host": "d"}, "values": []},
            {"metric": {"host": "e"}, "histograms": [[10, {"count": "4", "sum": "2"}]]},
        ],
    },
}


def _wire(answer: dict) -> bytes:
    """Return the answer as Prometheus writes it (no spaces)."""
    return json.dumps(answer, separators=(",", ":")).encode()


def _parsed(answer: dict) -> list[tuple[dict, tuple, tuple]]:
    out = []
    for r in answer["data"]["result"]:
        points = r.get("values") or [(ts, h.get("count")) for ts, h in r.get("histograms", ())]
        out.append((r["metric"], *_floats(points)))
    return out


def _same(a: list, b: list) -> bool:
    def key(rows: list) -> list:
        return [(m, ts, tuple("nan" if math.isnan(v) else v for v in vs)) for m, ts, vs in rows]

    return key(a) == key(b)


def test_the_cut_arrays_give_the_points_the_parsed_answer_gave():
    body = _wire(ANSWER)
    skeleton, arrays = cut_values(body)
    assert len(arrays) == 4 and b"61.5" not in skeleton and b'\\"values\\":[[1' in skeleton
    assert _same(_parsed(load_answer(body, cut=True)), _parsed(json.loads(body)))
    assert _parsed(load_answer(body, cut=True))[1][2][1] == math.inf
    # another server's spacing: nothing is cut, the answer is parsed whole
    spaced = json.dumps(ANSWER).encode()
    assert cut_values(spaced) == (spaced, []) and _same(
        _parsed(load_answer(spaced, cut=True)), _parsed(ANSWER)
    )


def test_the_client_reads_a_range_answer_through_the_cut_arrays():
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=_wire(ANSWER)))
    with PrometheusClient("http://prom.test", retries=0, transport=transport) as c:
        got = [(s.labels, s.timestamps, s.values) for s in c.query_range("x", 10, 130, 60)]
    assert _same(got, _parsed(ANSWER))
    assert got[0][1] == (10.0, 70.5) and got[2][2][1] == 0.30000000000000004 and got[3][1:] == ((), ())


def test_an_answer_cut_short_is_refused_as_before():
    body = _wire(ANSWER)[:200]
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    with PrometheusClient("http://prom.test", retries=0, transport=transport) as c:
        try:
            c.query_range("x", 10, 130, 60)
        except Exception as exc:  # noqa: BLE001 - the type is the client's own
            assert "non-JSON" in str(exc)
        else:
            raise AssertionError("a truncated answer was accepted")
