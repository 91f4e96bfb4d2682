"""One name per host: the scheduler's, else an exporter's name without a domain; IP addresses whole."""

from __future__ import annotations

from playbooks.hostnames import canonical_names, host_names, rename_outputs, same_host


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


def test_every_name_and_label_value_of_a_host_leads_to_its_one_name_and_back():
    """DCGM's short name, node_exporter's FQDN, its `instance` and the address node_uname_info names: one
    host, named as the diagnosis names it; a filter typed as any of them selects the PromQL's host values."""
    names = host_names(
        ["gpu-1", "gpu-1.cluster.internal", "gpu-2"],
        uname=[("10.0.3.17:9100", "gpu-1.cluster.internal"), ("gpu-2:9100", "gpu-2")],
    )
    for value in (
        "gpu-1",
        "gpu-1.cluster.internal",
        "gpu-1.cluster.internal:9100",
        "10.0.3.17:9100",
        "10.0.3.17",
    ):
        assert names.name(value) == "gpu-1", value
        assert names.aliases(value) == ("gpu-1", "gpu-1.cluster.internal"), value
    assert names.name("gpu-2:9100") == "gpu-2" and names.aliases("gpu-2") == ("gpu-2",)
    assert names.renames() == {"gpu-1.cluster.internal": "gpu-1"}
    assert names.select(["10.0.3.17", "gpu-1", "gpu-2"]) == ("gpu-1", "gpu-1.cluster.internal", "gpu-2")
    assert not names.knows("10.9.9.9:9100") and names.name("10.9.9.9:9100") == "10.9.9.9:9100"


def test_a_name_the_source_lacks_finds_its_fqdn_and_the_schedulers_name_wins():
    names = host_names(["gpu-7.cluster.internal"])
    assert names.name("gpu-7.cluster.internal") == "gpu-7.cluster.internal", "no other name: its own"
    assert names.aliases("gpu-7") == ("gpu-7.cluster.internal",)
    assert names.aliases("gpu-8") == ("gpu-8",), "an unknown host selects itself"
    named = host_names(["gpu-7.cluster.internal"], nodes=["gpu-7"])
    assert named.name("gpu-7.cluster.internal") == "gpu-7" and named.aliases("gpu-7") == (
        "gpu-7.cluster.internal",
    )
