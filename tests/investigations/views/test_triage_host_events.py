"""The triage region lists the log's host events (`details.host_events`): kind, host, time and line of each."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from playbooks.triage import triage_log

from .investigation_helpers import HTMX, make_investigation

pytestmark = pytest.mark.django_db

LOG = [
    "JOB_ID=81234",
    "NNODES=4",
    "JOB_NODELIST=gpu-[101-104]",
    "0: I0301 10:10:00.000000 1 train.py:1] ====== BARRIER PASSED: Starting training loop ======",
    *(
        f"0: completed step: {i}, seconds: 10.000, TFLOP/s/device: 1.0, Tokens/s/device: 100.0, "
        "total_weights: 1, loss: 2.0"
        for i in range(20)
    ),
    "Mar  1 10:15:02 gpu-102 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.",
    "srun: error: Node failure on gpu-104",
    "srun: error: gpu-103: task 2: Killed",
]


def _region(client, triage: dict) -> str:
    investigation = make_investigation(triage=triage)
    response = client.get(reverse("investigations:triage", args=[investigation.pk]), **HTMX)
    assert response.status_code == 200
    return response.content.decode()


def _rows(body: str) -> list[str]:
    return [re.sub(r"<[^>]+>", " ", r) for r in re.findall(r'<tr data-testid="host-event">(.*?)</tr>', body)]


def test_each_host_event_is_a_row_with_kind_host_time_and_line(alice_client) -> None:
    triage = triage_log(LOG).to_dict() | {"state": "done"}
    body = _region(alice_client, triage)
    rows = [" ".join(r.split()) for r in _rows(body)]
    assert len(rows) == 3, rows
    xid, failure, killed = rows
    assert xid.startswith("Xid Xid 79 gpu-102") and "10:15:02 UTC" in xid and f"L{len(LOG) - 2}" in xid
    assert failure.startswith("node failure gpu-104") and f"L{len(LOG) - 1}" in failure
    assert killed.startswith("killed SIGKILL (137) gpu-103") and f"L{len(LOG)}" in killed
    assert "3 host events" in body  # in the folded region's one-line summary


def test_a_log_without_host_events_says_so(alice_client) -> None:
    triage = triage_log(LOG[:-3]).to_dict() | {"state": "done"}
    body = _region(alice_client, triage)
    assert (
        not _rows(body)
        and 'data-testid="host-events-none"' in body
        and "host event" not in body.split("</summary>")[0]
    )


def test_many_events_are_cut_with_a_count_of_the_rest(alice_client) -> None:
    events = [
        {"kind": "killed", "host": f"gpu-{i:03d}", "time": None, "line": 100 + i, "code": 143, "text": "x"}
        for i in range(30)
    ]
    triage = triage_log(LOG[:-3]).to_dict() | {"state": "done"}
    triage["details"]["host_events"] = events
    body = _region(alice_client, triage)
    assert len(_rows(body)) == 25 and "and 5 more" in body and "SIGTERM (143)" in body
