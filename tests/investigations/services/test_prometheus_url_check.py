"""Stepwise only queries Prometheus servers on the allow-list; entries parse or are reported."""

from __future__ import annotations

import pytest

import stepwise.settings as defaults
from investigations import services
from investigations.models import DataSource
from stepwise.checks import allow_rule_parse


@pytest.fixture
def default_list(settings) -> None:
    """The allow-list as shipped (the investigations tests' conftest widens it to any loopback port)."""
    settings.STEPWISE_ALLOWED_PROMETHEUS = defaults.STEPWISE_ALLOWED_PROMETHEUS


@pytest.mark.parametrize(
    ("url", "normalised"),
    [
        ("http://127.0.0.1:9090", "http://127.0.0.1:9090"),
        ("http://localhost:19190/", "http://localhost:19190"),
        ("http://LOCALHOST:9090/prom/?x=1", "http://LOCALHOST:9090/prom"),
        ("http://[::1]:9090", "http://[::1]:9090"),
        ("https://127.0.0.1:9199", "https://127.0.0.1:9199"),
        ("http://127.0.0.1:20190", "http://127.0.0.1:20190"),
    ],
)
@pytest.mark.usefixtures("default_list")
def test_the_default_list_allows_loopback(url: str, normalised: str) -> None:
    """With the defaults, only 127.0.0.1, localhost and ::1 on the Prometheus ports 9090-9199 and the
    ranges of the app's own served copies (19190-19989) and tunnels (20190-20989) are allowed."""
    assert services.prometheus_url_check(url) == normalised


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://10.0.0.5:9090", "Prometheus at 10.0.0.5:9090 is not allowed"),
        ("http://127.0.0.2:9090", "Prometheus at 127.0.0.2:9090 is not allowed"),
        ("http://localhost.evil.example:9090", "is not allowed"),
        ("http://127.0.0.1@evil.example/", "Prometheus at evil.example:80 is not allowed"),
        ("ftp://127.0.0.1/", "is not an http:// or https:// URL"),
        ("127.0.0.1:9090", "is not an http:// or https:// URL"),
        ("http://127.0.0.1:notaport", "has an invalid port"),
        ("http://127.0.0.1:6379", "Prometheus at 127.0.0.1:6379 is not allowed"),  # Redis
        ("http://localhost:5432", "Prometheus at localhost:5432 is not allowed"),  # PostgreSQL
        ("https://127.0.0.1", "Prometheus at 127.0.0.1:443 is not allowed"),
    ],
)
@pytest.mark.usefixtures("default_list")
def test_it_refuses_other_hosts_with_a_clear_message(url: str, message: str) -> None:
    """Refusals say which host was refused and which setting governs it."""
    with pytest.raises(services.DataSourceError, match=message.replace(".", r"\.")) as exc:
        services.prometheus_url_check(url)
    if "not allowed" in message:
        assert "STEPWISE_ALLOWED_PROMETHEUS (127.0.0.1:9090-9199, 127.0.0.1:19190-19989" in str(exc.value)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://10.20.30.40:9090", True),  # in 10.0.0.0/8
        ("http://11.0.0.1:9090", False),
        ("http://prometheus:9090", True),  # host:port entry
        ("http://prometheus:9091", False),
        ("http://PROMETHEUS.:9090", True),  # case and trailing dot do not matter
        ("http://[fd00::5]:443", True),  # [v6]:port entry
        ("http://[fd00::5]:9090", False),
        ("http://127.0.0.1:9090", False),  # loopback is not implied
    ],
)
def test_custom_lists_take_hosts_ports_and_networks(settings, url: str, allowed: bool) -> None:
    """CIDR allows any port; host:port allows one port; hostnames are compared, not resolved."""
    settings.STEPWISE_ALLOWED_PROMETHEUS = ["10.0.0.0/8", "prometheus:9090", "[fd00::5]:443", "bad entry!"]
    if allowed:
        services.prometheus_url_check(url)
    else:
        with pytest.raises(services.DataSourceError, match="is not allowed"):
            services.prometheus_url_check(url)


@pytest.mark.parametrize(
    "entry",
    ["http://prom:9090", "10.0.0.0/33", "host:port", "[::1", "bad entry!", "a..b", "1.2.3.4:0", "[prom]:80"],
)
def test_malformed_entries_are_rejected(entry: str) -> None:
    with pytest.raises(ValueError):
        allow_rule_parse(entry)


@pytest.mark.django_db
def test_creating_a_url_source_checks_the_list() -> None:
    with pytest.raises(services.DataSourceError, match="not allowed"):
        services.datasource_create(kind=DataSource.Kind.URL, address="http://192.168.1.10:9090")
    source = services.datasource_create(kind=DataSource.Kind.URL, address="http://127.0.0.1:9090/")
    assert source.address == "http://127.0.0.1:9090"


@pytest.mark.django_db
def test_a_stored_url_source_is_checked_again_when_used(settings) -> None:
    """Narrowing the list later also stops sources saved before."""
    source = DataSource.objects.create(kind=DataSource.Kind.URL, address="http://127.0.0.1:9090")
    settings.STEPWISE_ALLOWED_PROMETHEUS = ["prometheus"]
    with pytest.raises(services.DataSourceError, match="127.0.0.1:9090 is not allowed"):
        services.datasource_client(source)
