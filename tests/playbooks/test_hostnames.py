"""One name per host: the scheduler's, else an exporter's name without a domain; IP addresses whole."""

from __future__ import annotations

from playbooks.hostnames import canonical_names, rename_outputs, same_host


def test_an_fqdn_whose_first_label_is_a_known_host_is_that_host():
    names = canonical_names(["gpu-238.cluster.internal", "gpu-238", "gpu-7.cluster.internal"])
    assert names == {"gpu-238.cluster.internal": "gpu-238"}, "gpu-7 has no other name: it keeps its own"


def test_the_schedulers_name_wins_either_way():
    assert canonical_names(["ip-10-3-14-51.ec2.internal"], ["ip-10-3-14-51"]) == {
        "ip-10-3-14-51.ec2.internal": "ip-10-3-14-51"
    }
    assert canonical_names(["gpu-1", "gpu-1.x"], ["gpu-1.x"]) == {"gpu-1": "gpu-1.x"}


def test_an_ip_address_is_never_cut_at_its_dots_nor_two_domains_joined():
    assert canonical_names(["10.1.0.250", "10"], ["10"]) == {}
    assert not same_host("gpu-1.a", "gpu-1.b")
    assert canonical_names(["gpu-1.b"], ["gpu-1.a"]) == {}


def test_series_of_one_host_under_two_names_become_one():
    results = {
        "mem": {
            "kind": "range",
            "series": [
                {"labels": {"host": "gpu-1.x"}, "values": [1.0, None, 3.0]},
                {"labels": {"host": "gpu-1"}, "values": [None, 2.0, 9.0]},
                {"labels": {"host": "gpu-2"}, "values": [5.0, 5.0, 5.0]},
            ],
        },
        "up": {"kind": "instant", "samples": [{"labels": {"host": "gpu-1.x", "gpu": "0"}, "value": 1.0}]},
    }
    out = rename_outputs(results, {"gpu-1.x": "gpu-1"})
    assert out["mem"]["series"] == [
        {"labels": {"host": "gpu-1"}, "values": [1.0, 2.0, 3.0]},
        {"labels": {"host": "gpu-2"}, "values": [5.0, 5.0, 5.0]},
    ]
    assert out["up"]["samples"] == [{"labels": {"host": "gpu-1", "gpu": "0"}, "value": 1.0}]
    assert results["mem"]["series"][0]["labels"]["host"] == "gpu-1.x", "the input is left as it was"
