"""Semantic signals ("GPU power", "RDMA retransmits") and how one exporter family's series become them.

A `Signal` maps one semantic signal to PromQL that yields series with *normalised* labels, whatever the
exporter calls them:

- GPU-scope signals give one series per (`host`, `gpu`);
- host-scope signals give one series per `host`;
- job-scope signals (training gauges, exported by rank 0 only) give one series with no labels.

`host` is taken from the exporter's own host label (`host`, DCGM's `Hostname`/`hostname`, AMD's
`hostname`), or from `instance` without its port, optionally joined through `node_uname_info` to the
node's own name (`host_join = "uname"`: node_exporter scraped by IP, DCGM run with `--no-hostname`), so
that the playbooks can write `max by (host) (...)` for every exporter alike. Counters are turned into
rates (or increases) before labels are mapped and series are aggregated: a cumulative counter's
absolute value is never a signal by itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from playbooks.errors import PlaybooksError
from playbooks.prometheus_types import parse_duration

__all__ = ["DOMAINS", "EVENT_SIGNALS", "SIGNALS", "Profile", "ProfileError", "Signal", "signal_info"]


class ProfileError(PlaybooksError):
    """A profile or signal name is unknown, or a signal is used in a way its kind does not allow."""


#: Domains, in the order timelines stack them.
DOMAINS = ("training", "gpu", "network", "host", "monitoring")

# name: (domain, scope, kind, unit, title)
_SIGNAL_INFO: dict[str, tuple[str, str, str, str, str]] = {
    # training (job scope, exported by rank 0)
    "step": ("training", "job", "gauge", "step", "Training step"),
    "loss": ("training", "job", "gauge", "", "Loss"),
    "grad_norm": ("training", "job", "gauge", "", "Gradient norm"),
    "learning_rate": ("training", "job", "gauge", "", "Learning rate"),
    "step_time": ("training", "job", "gauge", "s", "Step time"),
    "tokens_per_sec": ("training", "job", "gauge", "tokens/s", "Tokens per second per device"),
    "moe_lb_loss": ("training", "job", "gauge", "", "MoE load-balance loss"),
    "staleness_fill": ("training", "job", "gauge", "", "Staleness fill (1 = value repeated, not a new step)"),
    "last_step_timestamp": ("training", "job", "gauge", "unix s", "Time of the last completed step"),
    # GPU
    "gpu_power": ("gpu", "gpu", "gauge", "W", "GPU power"),
    "gpu_temp": ("gpu", "gpu", "gauge", "°C", "GPU temperature"),
    "gpu_clock": ("gpu", "gpu", "gauge", "MHz", "GPU core clock"),
    "gpu_util": ("gpu", "gpu", "gauge", "%", "GPU utilisation"),
    "gpu_vram_used": ("gpu", "gpu", "gauge", "bytes", "VRAM used"),
    "gpu_vram_total": ("gpu", "gpu", "gauge", "bytes", "VRAM total"),
    "gpu_ecc_uncorrectable": ("gpu", "gpu", "counter", "errors", "Uncorrectable ECC/RAS errors"),
    "gpu_ecc_correctable": ("gpu", "gpu", "counter", "errors", "Correctable ECC/RAS errors"),
    "gpu_pcie_fatal": ("gpu", "gpu", "counter", "errors", "PCIe fatal errors"),
    "gpu_pcie_correctable": ("gpu", "gpu", "counter", "errors", "PCIe correctable errors / replays"),
    "gpu_xid": ("gpu", "gpu", "gauge", "code", "Xid error code, while it is new (no series otherwise)"),
    # network
    "tcp_retransmits": ("network", "host", "counter", "segments", "TCP retransmits"),
    "tcp_abort_on_timeout": ("network", "host", "counter", "connections", "TCP aborts on timeout"),
    "rdma_retransmits": ("network", "host", "counter", "packets", "RDMA retransmitted packets"),
    "rdma_ack_timeouts": ("network", "host", "counter", "events", "RDMA ACK timeouts"),
    "rdma_retry_exceeded": ("network", "host", "counter", "events", "RDMA retry exhaustion"),
    "rdma_cnp": ("network", "host", "counter", "packets", "RDMA congestion notifications (CNP)"),
    "rdma_seq_errors": (
        "network",
        "host",
        "counter",
        "packets",
        "RDMA packet sequence errors / out of sequence",
    ),
    "rdma_transmit_wait": ("network", "host", "counter", "ticks", "InfiniBand transmit wait"),
    "rdma_link_error_recovery": ("network", "host", "counter", "events", "InfiniBand link error recoveries"),
    "rdma_link_downed": ("network", "host", "counter", "events", "InfiniBand link downed"),
    "rdma_symbol_errors": ("network", "host", "counter", "errors", "InfiniBand symbol errors"),
    "rdma_tx_bytes": ("network", "host", "counter", "bytes", "RDMA bytes sent"),
    "rdma_ports_down": (
        "network",
        "host",
        "gauge",
        "ports",
        "RDMA ports not active (no series while all are)",
    ),
    "nic_errors": ("network", "host", "counter", "errors", "NIC rx/tx errors"),
    # host
    "procs_running": ("host", "host", "gauge", "processes", "Runnable processes"),
    "procs_blocked": ("host", "host", "gauge", "processes", "Blocked processes (D state)"),
    "oom_kills": ("host", "host", "counter", "kills", "OOM kills"),
    "mem_used": ("host", "host", "gauge", "bytes", "Host memory used"),
    "mem_total": ("host", "host", "gauge", "bytes", "Host memory total"),
    "mem_dirty": ("host", "host", "gauge", "bytes", "Dirty page cache"),
    "mem_writeback": ("host", "host", "gauge", "bytes", "Writeback"),
    "io_pressure": ("host", "host", "gauge", "%", "I/O pressure (some)"),
    "io_pressure_full": ("host", "host", "gauge", "%", "I/O pressure (full)"),
    "cpu_util": ("host", "host", "gauge", "%", "CPU utilisation"),
    "context_switches": ("host", "host", "counter", "switches", "Context switches"),
    "kernel_activity": ("host", "host", "counter", "events", "Counters a live kernel never holds still"),
    "dmesg_gpu_errors": ("host", "host", "counter", "errors", "GPU errors in dmesg"),
    "gpu_processes": ("host", "host", "gauge", "processes", "Processes using GPUs"),
    # monitoring (the data about the data)
    "exporter_scrape_duration": ("monitoring", "host", "gauge", "s", "Exporter's own collection time"),
    "scrape_duration": ("monitoring", "host", "gauge", "s", "Prometheus scrape duration"),
    "up": ("monitoring", "host", "gauge", "", "Target up"),
    "gpu_up": ("monitoring", "host", "gauge", "", "GPU exporter's target up"),
    # training signals a team's trainer may export (the seeds' list); no built-in profile has them
    "dataloader_wait": ("training", "job", "gauge", "s", "Data-loader wait per step"),
    "checkpoint_save_time": ("training", "job", "gauge", "s", "Checkpoint save latency"),
    "restarts": ("training", "job", "counter", "restarts", "Trainer restarts"),
    "heartbeat_age": ("training", "job", "gauge", "s", "Oldest rank heartbeat age"),
}

#: Every signal name any profile may define.
SIGNALS: tuple[str, ...] = tuple(_SIGNAL_INFO)

#: Signals whose series exist only while their event holds (a new Xid, a port not active): computed with
#: filters, which keep each series' labels, where a `bool` comparison gave every GPU or port a 0 by
#: rebuilding its label set at every step (most of the cost of the query on a large job).
EVENT_SIGNALS: frozenset[str] = frozenset({"gpu_xid", "rdma_ports_down"})

#: the resolution of the subquery a windowed function of an expression reads
SUBQUERY_STEP = "5m"
_SCOPE_LABELS = {"gpu": ("host", "gpu"), "host": ("host",), "job": ()}
_FUNCS_COUNTER = ("rate", "increase", "irate", "resets")
_FUNCS_GAUGE = (
    "avg_over_time",
    "min_over_time",
    "max_over_time",
    "stddev_over_time",
    "changes",
    "deriv",
    "delta",
    "last_over_time",
    "count_over_time",
    "quantile_over_time",
)


@dataclass(frozen=True)
class Signal:
    """One semantic signal as one profile exports it.

    Attributes:
        name: semantic name, a key of `SIGNALS` ("gpu_power").
        selector: PromQL giving the raw series: a selector (`hw_gpu_clock_mhz{type="sclk"}`), several
            counter selectors joined by " | " that the signal sums (`a_total | b_total`) or, for gauges only,
            an expression (`node_memory_MemTotal_bytes - node_memory_MemAvailable_bytes`).
        metrics: the metric names the selector needs; the signal is available when any of them is in the TSDB.
        host_from: label holding the host: "host", "Hostname" or "instance" (port stripped); "" for job scope.
        gpu_from: label holding the GPU index ("gpu", "GpuIndex"); "" unless GPU scope.
        scale: factor applied after aggregation (MiB -> bytes, seconds/s -> %).
        agg: how series of one output label set are combined: "sum" for counters across devices, "max" or
            "min" for gauges.
        domain, scope, kind, unit, title: from `SIGNALS`.
        host_join: "uname" to take the host from `node_uname_info{nodename}` of the node whose address
            (`instance` without its port) is this series' `instance` (exporters scraped by IP, DCGM with
            `--no-hostname`); `host_from` is then "instance". "" for none.
        host_alias: (old, new) host names: an exporter pod restarted under another name on the same
            target reports `new` from then on; its earlier series are renamed to it. With `host_join`:
            (old, new) addresses of one GPU exporter (the same GPU UUIDs) whose pod came back elsewhere.
        fill_filter: PromQL of a 0/1 staleness-fill gauge; samples where it is 1 are dropped.
        as_counter: the exporter exposes as a counter what `SIGNALS` calls a gauge (PSI seconds, whose rate
            x 100 is the percentage another exporter reports directly).
        gpu_index: ("", metric): `gpu_from` names a GPU (nvidia_gpu_exporter's `uuid`) whose index is the
            value of `metric{<gpu_from>}`; (label, metric): the index is `label` of `metric{<gpu_from>}` (an
            info metric). () : `gpu_from` holds the GPU's name itself.
    """

    name: str
    selector: str
    metrics: tuple[str, ...]
    host_from: str = "host"
    gpu_from: str = ""
    scale: float = 1.0
    agg: str = ""
    fill_filter: str = ""
    as_counter: bool = False
    host_join: str = ""
    host_alias: tuple[tuple[str, str], ...] = ()
    gpu_index: tuple[str, ...] = ()
    domain: str = field(init=False)
    scope: str = field(init=False)
    kind: str = field(init=False)
    unit: str = field(init=False)
    title: str = field(init=False)

    def __post_init__(self) -> None:
        if self.name not in _SIGNAL_INFO:
            raise ProfileError(f"unknown signal {self.name!r}")
        domain, scope, kind, unit, title = _SIGNAL_INFO[self.name]
        kind = "counter" if self.as_counter else kind
        for attr, value in (
            ("domain", domain),
            ("scope", scope),
            ("kind", kind),
            ("unit", unit),
            ("title", title),
        ):
            object.__setattr__(self, attr, value)
        if not self.agg:
            object.__setattr__(self, "agg", "sum" if kind == "counter" else "max")
        if scope == "gpu" and not self.gpu_from:
            object.__setattr__(self, "gpu_from", "gpu")
        if scope == "job":
            object.__setattr__(self, "host_from", "")
            object.__setattr__(self, "host_join", "")
        if self.host_join not in ("", "uname"):
            raise ProfileError(f'{self.name}: unknown host_join {self.host_join!r} (use "uname" or nothing)')
        if self.host_join:
            object.__setattr__(self, "host_from", "instance")

    def _apply(self, fn: str | None, base: str, window: str, quantile: float | None) -> str:
        if self.is_counter:
            fn = fn or "rate"
            if fn not in _FUNCS_COUNTER:
                raise ProfileError(
                    f"{self.name} is a counter: use one of {', '.join(_FUNCS_COUNTER)}, not {fn!r}"
                )
            return f"{fn}({base}[{window}])"
        if not fn:
            return base
        if fn not in _FUNCS_GAUGE:
            raise ProfileError(
                f"{self.name} is a gauge: {fn!r} does not apply (use one of {', '.join(_FUNCS_GAUGE)})"
            )
        # a subquery's own resolution: without one Prometheus steps it at its evaluation interval, which a
        # served copy sets to 999h (no step inside the window) and a live server sets as it likes; events
        # that last 10 minutes (a new Xid) are all seen at 5-minute steps
        series = f"{base}[{window}]" if _is_simple_selector(base) else f"({base})[{window}:{SUBQUERY_STEP}]"
        return f"{fn}({quantile}, {series})" if fn == "quantile_over_time" else f"{fn}({series})"

    @property
    def labels(self) -> tuple[str, ...]:
        """Return the normalised labels of this signal's series: ("host", "gpu"), ("host",) or ()."""
        return _SCOPE_LABELS[self.scope]

    @property
    def is_counter(self) -> bool:
        return self.kind == "counter"

    def expr(
        self,
        fn: str | None = None,
        *,
        window: str = "5m",
        by: Iterable[str] | None = None,
        agg: str | None = None,
        quantile: float | None = None,
    ) -> str:
        """Return PromQL for this signal with normalised labels.

        1. Counters get `fn(selector[window])`, `fn` defaulting to "rate" ("increase", "irate", "resets");
           gauges get no function, or a `*_over_time` / `changes` / `deriv` function over `window`.
        2. The staleness-fill filter, if any, drops repeated training samples.
        3. `host` (and `gpu`) are copied from the exporter's labels.
        4. Series are combined with `agg` (default: the signal's own) by `by` (default: the scope's labels),
           then scaled.
        """
        bases = self.selector.split(" | ")
        if self.fill_filter:
            # Filter before any *_over_time function, so repeated samples never enter a window.
            bases = [f"({b} unless on() ({self.fill_filter} == 1))" for b in bases]
        parts = [self._apply(fn, base, window, quantile) for base in bases]
        if len(parts) == 1:
            inner = parts[0]
        else:
            # Several counters summed into one signal: rate() drops __name__, so tell them apart with a
            # label before joining, or Prometheus refuses duplicate label sets.
            tagged = [f'label_replace({p}, "stepwise_part", "{i}", "", "")' for i, p in enumerate(parts)]
            inner = "(" + " or ".join(tagged) + ")"
        labels = tuple(self.labels if by is None else by)
        if self.gpu_index and "gpu" in labels:
            # the GPU's index from its exporter's own table, then the rest as for an exporter labelling it
            inner = f"({inner} * on ({self.gpu_from}) group_left (gpu) {gpu_index_table(self, window)})"
            return replace(self, gpu_from="gpu", gpu_index=())._finish(inner, labels, agg, window)
        return self._finish(inner, labels, agg, window)

    @property
    def renamed(self) -> bool:
        """True when the host or GPU name comes from other series (node_uname_info, a GPU index), an alias or
        one of several labels: only `expr` names the series (no raw selector's labels do)."""
        return bool(self.host_join or self.host_alias or "," in self.host_from or self.gpu_index)

    def _finish(self, inner: str, labels: tuple[str, ...], agg: str | None, window: str) -> str:
        """Name `inner`'s host and GPU, aggregate it by `labels` and scale it."""
        if self.host_join and "host" in labels:
            return self._joined(inner, labels, agg or self.agg, window)
        inner = _host_relabel(inner, self.host_from)
        for old, new in self.host_alias:
            inner = f'label_replace({inner}, "host", "{new}", "host", "{_regex_literal(old)}")'
        if self.gpu_from and self.gpu_from != "gpu":
            inner = f'label_replace({inner}, "gpu", "$1", "{self.gpu_from}", "(.+)")'
        out = (
            f"{agg or self.agg} by ({', '.join(labels)}) ({inner})"
            if labels
            else f"{agg or self.agg}({inner})"
        )
        if self.scale != 1.0:
            out = f"({out}) * {self.scale:g}"
        return out

    def _joined(self, inner: str, labels: tuple[str, ...], agg: str, window: str) -> str:
        """Aggregate by the exporter's address first, then name the (few) results through node_uname_info
        (as it was within `window`, see `uname_hosts`)."""
        raw = tuple(
            "instance" if n == "host" else (self.gpu_from or "gpu") if n == "gpu" else n for n in labels
        )
        for old, new in self.host_alias:  # an address its restarted pod reported from before: the node's
            inner = f'label_replace({inner}, "instance", "{new}", "instance", "{_regex_literal(old)}(?::[0-9]+)?")'
        first = f"{agg} by ({', '.join(raw)}) ({inner})"
        named = f'label_replace({first}, "stepwise_ip", "$1", "instance", "{_ADDRESS}")'
        named = f'label_replace({named} * on (stepwise_ip) group_left (nodename) {uname_hosts(window)}, "host", "$1", "nodename", "(.+)")'
        if "gpu" in labels and self.gpu_from and self.gpu_from != "gpu":
            named = f'label_replace({named}, "gpu", "$1", "{self.gpu_from}", "(.+)")'
        out = f"{_OUTER.get(agg, agg)} by ({', '.join(labels)}) ({named})"
        return f"({out}) * {self.scale:g}" if self.scale != 1.0 else out


#: `instance` without its port (host names, IPv4, bracketed IPv6).
_ADDRESS = "(.+?)(?::[0-9]+)?"
_OUTER = {"count": "sum"}
#: How far back node_uname_info names an address at each evaluation (a few of its scrapes).
UNAME_RECENT = "10m"


def _uname_table(lookback: str) -> str:
    """One node name per address, so that a renamed node or two exporters on one address never make a
    many-to-many match."""
    return (
        "topk by (stepwise_ip) (1, label_replace(max by (instance, nodename) "
        f'(last_over_time(node_uname_info[{lookback}])), "stepwise_ip", "$1", "instance", "{_ADDRESS}"))'
    )


def uname_hosts(window: str = "") -> str:
    """Return PromQL naming each address by node_uname_info{nodename}: its name of the last `UNAME_RECENT`,
    else (an expression whose `window` reaches further back) its last name within `window`.

    A node that died long before the evaluation (a host list over the whole data, its last value in a
    job-long window) stopped reporting its uname with everything else: only a lookback as long as the
    window its own series are read over still names it. Its recent name wins for an address that a renamed
    node reported under two, and a short window (a range query's rate) reads the uname samples of 10 min only.
    """
    recent = _uname_table(UNAME_RECENT)
    try:
        longer = parse_duration(window) > parse_duration(UNAME_RECENT)
    except ValueError:
        longer = False
    return f"({recent} or on (stepwise_ip) {_uname_table(window)})" if longer else recent


def gpu_index_table(sig: Signal, window: str = "") -> str:
    """Return PromQL of one series per GPU (`sig.gpu_from`, value 1) labelled `gpu` with its index, from its
    exporter's index metric (its value) or info metric (a label), as of the last `UNAME_RECENT`, or, for an
    expression reaching further back, within `window` (a GPU whose exporter stopped long before)."""
    label, metric = sig.gpu_index
    key = sig.gpu_from

    def table(lookback: str) -> str:
        last = f"last_over_time({metric}[{lookback}])"
        named = (
            f'count_values by ({key}) ("gpu", {last})'
            if not label
            else f'label_replace({last}, "gpu", "$1", "{label}", "(.+)")'
        )
        return f"topk by ({key}) (1, group by ({key}, gpu) ({named}))"

    try:
        longer = parse_duration(window) > parse_duration(UNAME_RECENT)
    except ValueError:
        longer = False
    recent = table(UNAME_RECENT)
    return f"({recent} or on ({key}) {table(window)})" if longer else recent


def _regex_literal(text: str) -> str:
    """Return `text` as an RE2 pattern matching exactly it, escaped for a PromQL string."""
    return "".join("\\\\" + c if c in ".+*?()[]{}|^$\\" else c for c in text)


def _host_relabel(inner: str, host_from: str) -> str:
    """Copy the host label; with several ("Hostname,hostname": nodes on two exporter releases) the first present wins."""
    if host_from == "instance":
        return f'label_replace({inner}, "host", "$1", "instance", "{_ADDRESS}")'
    for label in reversed(host_from.split(",")):
        if label and label != "host":
            inner = f'label_replace({inner}, "host", "$1", "{label}", "(.+)")'
    return inner


def _is_simple_selector(text: str) -> bool:
    """Return True for `name`, `name{...}` or `{...}`: things a range selector `[w]` may follow."""
    text = text.strip()
    if text.startswith("{"):
        return text.endswith("}") and text.count("{") == 1
    head, _, rest = text.partition("{")
    return head.replace("_", "").replace(":", "").isalnum() and (
        not rest or (rest.endswith("}") and "{" not in rest)
    )


@dataclass(frozen=True)
class Profile:
    """The signals of one exporter family.

    Attributes:
        name: the declaration's name ("amd", "nvidia", "amd-dme", "node", a team's), followed for one TSDB
            by its choices ("nvidia@dcgm.host=hostname"; see `playbooks.profiles._resolve`).
        title: for people.
        signals: signal name -> Signal; signals the family lacks are absent.
        anchors: metric names whose presence identifies the family.
        vendor: GPU vendor, for choosing GPU models ("" when the family has no GPU exporter).
        base: the declaration's name ("nvidia" for "nvidia@...").
        gpu_model_label: the label naming the GPU model ("modelName", "card_model"), "" if none.
        gpu_model_metric: the metric carrying that label (nvidia_gpu_exporter's info metric); "": the GPU
            signals' own.
        source: the declaration file.
    """

    name: str
    title: str
    signals: Mapping[str, Signal]
    anchors: tuple[str, ...]
    vendor: str
    base: str = ""
    gpu_model_label: str = ""
    gpu_model_metric: str = ""
    source: str = ""

    def signal(self, name: str) -> Signal:
        """Return the signal, or raise ProfileError naming what the profile lacks."""
        try:
            return self.signals[name]
        except KeyError:
            if name not in _SIGNAL_INFO:
                raise ProfileError(f"unknown signal {name!r}") from None
            raise ProfileError(
                f"the {self.name} profile has no {name} signal ({_SIGNAL_INFO[name][4]})"
            ) from None

    def has(self, name: str) -> bool:
        return name in self.signals

    def expr(self, name: str, fn: str | None = None, **kw: Any) -> str:
        """Return `self.signal(name).expr(fn, **kw)`."""
        return self.signal(name).expr(fn, **kw)

    def available(self, metric_names: Iterable[str]) -> dict[str, bool]:
        """Return signal -> whether the TSDB holds a metric it needs (only the signals this profile defines)."""
        present = set(metric_names)
        return {name: any(m in present for m in sig.metrics) for name, sig in self.signals.items()}

    def unavailable(self, metric_names: Iterable[str] | None = None) -> list[str]:
        """Return the signals of `SIGNALS` this profile lacks, plus (given metric names) those absent from the TSDB."""
        missing = [name for name in SIGNALS if name not in self.signals]
        if metric_names is not None:
            missing += [name for name, ok in self.available(metric_names).items() if not ok]
        return sorted(set(missing), key=SIGNALS.index)

    def score(self, metric_names: Iterable[str]) -> float:
        """Return the share of this profile's metrics present, 0 when none of its anchors is."""
        present = set(metric_names)
        if not any(a in present for a in self.anchors):
            return 0.0
        needed = {m for sig in self.signals.values() for m in sig.metrics}
        return len(needed & present) / len(needed)


def signal_info(name: str) -> dict[str, str]:
    """Return {domain, scope, kind, unit, title} of a signal name, whatever the profile."""
    if name not in _SIGNAL_INFO:
        raise ProfileError(f"unknown signal {name!r}")
    domain, scope, kind, unit, title = _SIGNAL_INFO[name]
    return {"domain": domain, "scope": scope, "kind": kind, "unit": unit, "title": title}
