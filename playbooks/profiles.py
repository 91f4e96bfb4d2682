"""Metric profiles: what a semantic signal ("GPU power", "RDMA retransmits") is called by one exporter family.

A profile maps each signal to PromQL that yields series with *normalised* labels, whatever the exporter
calls them:

- GPU-scope signals give one series per (`host`, `gpu`);
- host-scope signals give one series per `host`;
- job-scope signals (training gauges, exported by rank 0 only) give one series with no labels.

`host` is taken from the exporter's own host label (`host`, DCGM's `Hostname`) or from `instance` without
its port, so that the playbooks can write `max by (host) (...)` for every profile alike. Counters are turned
into rates (or increases) before labels are mapped and series are aggregated: a cumulative counter's
absolute value is never a signal by itself.

A signal that a profile lacks is absent from `Profile.signals`; `Profile.unavailable()` lists it so that
callers report it as unavailable instead of guessing.

Usage::

    profile = detect_profile(metric_names)          # or PROFILES["nvidia"]
    profile.expr("gpu_power")                       # max by (host, gpu) (label_replace(DCGM_FI_DEV_POWER_USAGE, ...))
    profile.expr("rdma_retransmits", window="2m")   # sum by (host) (rate(hw_rdma_tx_retx_pkts_total[2m]))
    profile.expr("gpu_temp", by=("host",), agg="max")
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .gpus import GPU_MODELS

__all__ = [
    "DOMAINS",
    "PROFILES",
    "SIGNALS",
    "Profile",
    "ProfileError",
    "Signal",
    "detect_profile",
    "signal_info",
]


class ProfileError(Exception):
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
    "gpu_xid": ("gpu", "gpu", "gauge", "code", "Last Xid error code"),
    # network
    "tcp_retransmits": ("network", "host", "counter", "segments", "TCP retransmits"),
    "tcp_abort_on_timeout": ("network", "host", "counter", "connections", "TCP aborts on timeout"),
    "rdma_retransmits": ("network", "host", "counter", "packets", "RDMA retransmitted packets"),
    "rdma_ack_timeouts": ("network", "host", "counter", "events", "RDMA ACK timeouts"),
    "rdma_retry_exceeded": ("network", "host", "counter", "events", "RDMA retry exhaustion"),
    "rdma_cnp": ("network", "host", "counter", "packets", "RDMA congestion notifications (CNP)"),
    "rdma_transmit_wait": ("network", "host", "counter", "ticks", "InfiniBand transmit wait"),
    "rdma_link_error_recovery": ("network", "host", "counter", "events", "InfiniBand link error recoveries"),
    "rdma_link_downed": ("network", "host", "counter", "events", "InfiniBand link downed"),
    "rdma_tx_bytes": ("network", "host", "counter", "bytes", "RDMA bytes sent"),
    "rdma_ports_down": ("network", "host", "gauge", "ports", "RDMA ports not active"),
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
    "dmesg_gpu_errors": ("host", "host", "counter", "errors", "GPU errors in dmesg"),
    "gpu_processes": ("host", "host", "gauge", "processes", "Processes using GPUs"),
    # monitoring (the data about the data)
    "exporter_scrape_duration": ("monitoring", "host", "gauge", "s", "Exporter's own collection time"),
    "scrape_duration": ("monitoring", "host", "gauge", "s", "Prometheus scrape duration"),
    "up": ("monitoring", "host", "gauge", "", "Target up"),
}

#: Every signal name any profile may define.
SIGNALS: tuple[str, ...] = tuple(_SIGNAL_INFO)

_SCOPE_LABELS = {"gpu": ("host", "gpu"), "host": ("host",), "job": ()}
_FUNCS_COUNTER = ("rate", "increase", "irate", "resets")
_FUNCS_GAUGE = (
    "avg_over_time", "min_over_time", "max_over_time", "stddev_over_time", "changes", "deriv",
    "delta", "last_over_time", "count_over_time", "quantile_over_time",
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
        fill_filter: PromQL of a 0/1 staleness-fill gauge; samples where it is 1 are dropped.
        as_counter: the exporter exposes as a counter what `SIGNALS` calls a gauge (PSI seconds, whose rate
            x 100 is the percentage another exporter reports directly).
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
        for attr, value in (("domain", domain), ("scope", scope), ("kind", kind), ("unit", unit), ("title", title)):
            object.__setattr__(self, attr, value)
        if not self.agg:
            object.__setattr__(self, "agg", "sum" if kind == "counter" else "max")
        if scope == "gpu" and not self.gpu_from:
            object.__setattr__(self, "gpu_from", "gpu")
        if scope == "job":
            object.__setattr__(self, "host_from", "")

    def _apply(self, fn: str | None, base: str, window: str, quantile: float | None) -> str:
        if self.is_counter:
            fn = fn or "rate"
            if fn not in _FUNCS_COUNTER:
                raise ProfileError(f"{self.name} is a counter: use one of {', '.join(_FUNCS_COUNTER)}, not {fn!r}")
            return f"{fn}({base}[{window}])"
        if not fn:
            return base
        if fn not in _FUNCS_GAUGE:
            raise ProfileError(f"{self.name} is a gauge: {fn!r} does not apply (use one of {', '.join(_FUNCS_GAUGE)})")
        series = f"{base}[{window}]" if _is_simple_selector(base) else f"({base})[{window}:]"
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
        if self.host_from == "instance":
            inner = f'label_replace({inner}, "host", "$1", "instance", "(.+?)(?::[0-9]+)?")'
        elif self.host_from and self.host_from != "host":
            inner = f'label_replace({inner}, "host", "$1", "{self.host_from}", "(.+)")'
        if self.gpu_from and self.gpu_from != "gpu":
            inner = f'label_replace({inner}, "gpu", "$1", "{self.gpu_from}", "(.+)")'
        labels = tuple(self.labels if by is None else by)
        out = f"{agg or self.agg} by ({', '.join(labels)}) ({inner})" if labels else f"{agg or self.agg}({inner})"
        if self.scale != 1.0:
            out = f"({out}) * {self.scale:g}"
        return out


def _is_simple_selector(text: str) -> bool:
    """Return True for `name`, `name{...}` or `{...}`: things a range selector `[w]` may follow."""
    text = text.strip()
    if text.startswith("{"):
        return text.endswith("}") and text.count("{") == 1
    head, _, rest = text.partition("{")
    return head.replace("_", "").replace(":", "").isalnum() and (not rest or (rest.endswith("}") and "{" not in rest))


@dataclass(frozen=True)
class Profile:
    """The signals of one exporter family.

    Attributes:
        name: "amd" (the seed system: hw_*, ray_*, tb_*) or "nvidia" (DCGM exporter, node_exporter, training_*).
        title: for people.
        signals: signal name -> Signal; signals the family lacks are absent.
        anchors: metric names whose presence identifies the family.
        vendor: GPU vendor, for choosing GPU models.
    """

    name: str
    title: str
    signals: Mapping[str, Signal]
    anchors: tuple[str, ...]
    vendor: str

    def signal(self, name: str) -> Signal:
        """Return the signal, or raise ProfileError naming what the profile lacks."""
        try:
            return self.signals[name]
        except KeyError:
            if name not in _SIGNAL_INFO:
                raise ProfileError(f"unknown signal {name!r}") from None
            raise ProfileError(f"the {self.name} profile has no {name} signal ({_SIGNAL_INFO[name][4]})") from None

    def has(self, name: str) -> bool:
        return name in self.signals

    def expr(self, name: str, fn: str | None = None, **kw) -> str:
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


def _signals(*items: Signal) -> dict[str, Signal]:
    return {s.name: s for s in items}


def _amd() -> Profile:
    fill = "tb_metrics_plugin_staleness_fill"

    def tb(name: str, metric: str) -> Signal:
        return Signal(name, metric, (metric,), fill_filter=fill if name != "staleness_fill" else "")

    def hw(name: str, metric: str, selector: str = "", agg: str = "", more: tuple[str, ...] = ()) -> Signal:
        return Signal(name, selector or metric, (metric, *more), agg=agg)

    ray = {"host_from": "instance"}
    return Profile(
        name="amd",
        title="Seed system (AMD Instinct: hw_* GPU/host plugins, Ray, TensorBoard bridge)",
        vendor="amd",
        anchors=("hw_gpu_power_watts", "hw_gpu_temperature_celsius", "tb_step"),
        signals=_signals(
            tb("step", "tb_step"),
            tb("loss", "tb_learning_loss"),
            tb("grad_norm", "tb_learning_grad_norm"),
            tb("learning_rate", "tb_learning_current_learning_rate"),
            tb("step_time", "tb_perf_step_time_seconds"),
            tb("tokens_per_sec", "tb_perf_per_device_tokens_per_sec"),
            tb("moe_lb_loss", "tb_learning_moe_lb_loss"),
            tb("staleness_fill", fill),
            hw("gpu_power", "hw_gpu_power_watts"),
            hw("gpu_temp", "hw_gpu_temperature_celsius"),
            hw("gpu_clock", "hw_gpu_clock_mhz", 'hw_gpu_clock_mhz{type="sclk"}'),
            Signal("gpu_util", "ray_node_gpus_utilization", ("ray_node_gpus_utilization",), gpu_from="GpuIndex", **ray),
            hw("gpu_vram_used", "hw_gpu_vram_used_bytes"),
            hw("gpu_vram_total", "hw_gpu_vram_total_bytes"),
            hw("gpu_ecc_uncorrectable", "hw_gpu_ras_umc_ue_total",
               'hw_gpu_ras_umc_ue_total | hw_gpu_ras_xgmi_ue_total | hw_gpu_ras_gfx_ue_total',
               more=("hw_gpu_ras_xgmi_ue_total", "hw_gpu_ras_gfx_ue_total")),
            hw("gpu_ecc_correctable", "hw_gpu_ras_umc_ce_total", 'hw_gpu_ras_umc_ce_total | hw_gpu_ras_xgmi_ce_total',
               more=("hw_gpu_ras_xgmi_ce_total",)),
            hw("gpu_pcie_fatal", "hw_gpu_pcie_fatal_total"),
            hw("gpu_pcie_correctable", "hw_gpu_pcie_correctable_total"),
            hw("tcp_retransmits", "hw_tcp_retransmits_total"),
            hw("tcp_abort_on_timeout", "hw_tcp_abort_on_timeout_total"),
            hw("rdma_retransmits", "hw_rdma_tx_retx_pkts_total"),
            hw("rdma_ack_timeouts", "hw_rdma_tx_ack_timeout_total"),
            hw("rdma_retry_exceeded", "hw_rdma_req_tx_retry_excd_err_total"),
            hw("rdma_cnp", "hw_rdma_rx_cnp_pkts_total"),
            hw("rdma_tx_bytes", "hw_rdma_tx_bytes_total"),
            # hw_rdma_port_state is 1 for an active port: count the ports that are not.
            hw("rdma_ports_down", "hw_rdma_port_state", "(hw_rdma_port_state != bool 1)", agg="sum"),
            hw("nic_errors", "hw_net_rx_errors_total", 'hw_net_rx_errors_total | hw_net_tx_errors_total',
               more=("hw_net_tx_errors_total",)),
            hw("procs_running", "hw_procs_running"),
            hw("procs_blocked", "hw_procs_blocked"),
            hw("oom_kills", "hw_oom_kills_total"),
            Signal("mem_used", "ray_node_mem_used", ("ray_node_mem_used",), **ray),
            Signal("mem_total", "ray_node_mem_total", ("ray_node_mem_total",), **ray),
            Signal("cpu_util", "ray_node_cpu_utilization", ("ray_node_cpu_utilization",), **ray),
            hw("mem_dirty", "hw_mem_dirty_bytes"),
            hw("mem_writeback", "hw_mem_writeback_bytes"),
            hw("io_pressure", "hw_io_pressure_some_pct"),
            hw("io_pressure_full", "hw_io_pressure_full_pct"),
            hw("context_switches", "hw_context_switches_total"),
            hw("dmesg_gpu_errors", "hw_dmesg_gpu_errors_total"),
            hw("gpu_processes", "hw_gpu_user_processes"),
            hw("exporter_scrape_duration", "hw_scrape_duration_seconds"),
            Signal("scrape_duration", 'scrape_duration_seconds{job="node_hw"}', ("scrape_duration_seconds",), **ray),
            Signal("up", 'up{job="node_hw"}', ("up",), agg="min", **ray),
        ),
    )


def _nvidia() -> Profile:
    def dcgm(name: str, metric: str, selector: str = "", scale: float = 1.0, more: tuple[str, ...] = ()) -> Signal:
        return Signal(name, selector or metric, (metric, *more), host_from="Hostname", scale=scale)

    def node(name: str, metric: str, selector: str = "", scale: float = 1.0, agg: str = "",
             more: tuple[str, ...] = ()) -> Signal:
        return Signal(name, selector or metric, (metric, *more), host_from="instance", scale=scale, agg=agg)

    def training(name: str, metric: str) -> Signal:
        return Signal(name, metric, (metric,))

    mib = 1024.0 * 1024.0
    return Profile(
        name="nvidia",
        title="NVIDIA DCGM exporter + node_exporter + training_* gauges",
        vendor="nvidia",
        anchors=("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "training_step"),
        signals=_signals(
            training("step", "training_step"),
            training("loss", "training_loss"),
            training("grad_norm", "training_grad_norm"),
            training("learning_rate", "training_learning_rate"),
            training("step_time", "training_step_time_seconds"),
            training("tokens_per_sec", "training_tokens_per_second"),
            training("moe_lb_loss", "training_moe_lb_loss"),
            training("last_step_timestamp", "training_last_step_timestamp_seconds"),
            dcgm("gpu_power", "DCGM_FI_DEV_POWER_USAGE"),
            dcgm("gpu_temp", "DCGM_FI_DEV_GPU_TEMP"),
            dcgm("gpu_clock", "DCGM_FI_DEV_SM_CLOCK"),
            dcgm("gpu_util", "DCGM_FI_DEV_GPU_UTIL"),
            dcgm("gpu_vram_used", "DCGM_FI_DEV_FB_USED", scale=mib),
            dcgm("gpu_vram_total", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE", scale=mib,
                 more=("DCGM_FI_DEV_FB_FREE",)),
            dcgm("gpu_ecc_uncorrectable", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
            dcgm("gpu_ecc_correctable", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"),
            dcgm("gpu_pcie_correctable", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"),
            dcgm("gpu_xid", "DCGM_FI_DEV_XID_ERRORS"),
            node("tcp_retransmits", "node_netstat_Tcp_RetransSegs"),
            node("tcp_abort_on_timeout", "node_netstat_TcpExt_TCPAbortOnTimeout"),
            # node_exporter has no RDMA retransmit or ACK-timeout counter: InfiniBand trouble shows as
            # transmit-wait and link-error-recovery growth instead.
            node("rdma_transmit_wait", "node_infiniband_port_transmit_wait_total"),
            node("rdma_link_error_recovery", "node_infiniband_link_error_recovery_total"),
            node("rdma_link_downed", "node_infiniband_link_downed_total"),
            node("rdma_tx_bytes", "node_infiniband_port_data_transmitted_bytes_total"),
            # state_id 4 is ACTIVE.
            node("rdma_ports_down", "node_infiniband_state_id", "(node_infiniband_state_id != bool 4)", agg="sum"),
            node("nic_errors", "node_network_receive_errs_total",
                 'node_network_receive_errs_total | node_network_transmit_errs_total',
                 more=("node_network_transmit_errs_total",)),
            node("procs_running", "node_procs_running"),
            node("procs_blocked", "node_procs_blocked"),
            node("oom_kills", "node_vmstat_oom_kill"),
            node("mem_used", "node_memory_MemAvailable_bytes",
                 "node_memory_MemTotal_bytes - node_memory_MemAvailable_bytes", more=("node_memory_MemTotal_bytes",)),
            node("mem_total", "node_memory_MemTotal_bytes"),
            node("mem_dirty", "node_memory_Dirty_bytes"),
            node("mem_writeback", "node_memory_Writeback_bytes"),
            # PSI counters in seconds: rate x 100 is the share of time stalled, in percent.
            Signal("io_pressure", "node_pressure_io_waiting_seconds_total",
                   ("node_pressure_io_waiting_seconds_total",), host_from="instance", scale=100.0, agg="max", as_counter=True),
            Signal("io_pressure_full", "node_pressure_io_stalled_seconds_total",
                   ("node_pressure_io_stalled_seconds_total",), host_from="instance", scale=100.0, agg="max", as_counter=True),
            node("context_switches", "node_context_switches_total"),
            # DCGM exporters are usually scraped by IP: take the host name from the exporter's own series.
            Signal("scrape_duration",
                   'max by (instance, Hostname) (scrape_duration_seconds{job="dcgm-exporter"} * on (instance) '
                   'group_left (Hostname) group by (instance, Hostname) (last_over_time(DCGM_FI_DEV_GPU_TEMP[1h])))',
                   ("scrape_duration_seconds",), host_from="Hostname"),
            node("up", 'up{job="node"}', agg="min", more=("up",)),
        ),
    )


PROFILES: dict[str, Profile] = {p.name: p for p in (_amd(), _nvidia())}


def signal_info(name: str) -> dict[str, str]:
    """Return {domain, scope, kind, unit, title} of a signal name, whatever the profile."""
    if name not in _SIGNAL_INFO:
        raise ProfileError(f"unknown signal {name!r}")
    domain, scope, kind, unit, title = _SIGNAL_INFO[name]
    return {"domain": domain, "scope": scope, "kind": kind, "unit": unit, "title": title}


def detect_profile(metric_names: Iterable[str], *, prefer: str | None = None) -> Profile:
    """Return the profile that best matches the TSDB's metric names, or `PROFILES[prefer]` when given.

    An explicit profile wins over detection (a TSDB holding two families), but not over the data: a
    profile none of whose anchor metrics the TSDB holds would read nothing and call any job healthy.
    Raises ProfileError when `prefer` is unknown or absent from the TSDB, or no profile's anchor is present.
    """
    names = set(metric_names)
    if prefer and prefer != "auto":
        try:
            chosen = PROFILES[prefer]
        except KeyError:
            raise ProfileError(f"unknown profile {prefer!r}; known: {', '.join(PROFILES)}") from None
        if chosen.score(names) == 0.0:
            found = [p.name for p in PROFILES.values() if p.score(names) > 0]
            raise ProfileError(
                f"this TSDB holds none of the {prefer} profile's metrics ({', '.join(chosen.anchors[:3])}…)"
                + (f"; it holds the {', '.join(found)} profile's: use auto" if found else "")
            )
        return chosen
    scored = sorted(((p.score(names), p.name) for p in PROFILES.values()), reverse=True)
    best_score, best = scored[0]
    if best_score == 0.0:
        sample = ", ".join(sorted(names)[:8]) or "no metrics at all"
        raise ProfileError(
            f"no known metric profile matches this TSDB (it holds {sample}…); "
            f"known: {', '.join(p.title for p in PROFILES.values())}"
        )
    return PROFILES[best]


def vendor_mismatch(gpu_model: str, profile: str) -> str:
    """Return why a GPU model does not fit a profile's exporters (an H100 on the AMD seed system), or ""."""
    model, prof = GPU_MODELS.get(gpu_model), PROFILES.get(profile)
    if model is None or prof is None or model.vendor == prof.vendor:
        return ""
    return (
        f"{model.name} is an {model.vendor.upper()} GPU but this job's exporters are {prof.vendor.upper()}'s "
        f"({prof.name} profile): its power and thermal priors may not fit"
    )
