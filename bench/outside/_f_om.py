"""Outside corpus F (#10): the exporters as deployed, written as OpenMetrics and built into TSDB blocks.

GPU: utkuozdemir/nvidia_gpu_exporter (`nvidia_smi_*`, one `uuid` label, the index only in
`nvidia_smi_gpu_info` on newer versions and in `nvidia_smi_index`) or dcgm-exporter behind a
kube-prometheus-stack ServiceMonitor (`gpu`, `UUID`, `modelName`, `Hostname`/`hostname`, `pod`,
`namespace`, `exported_pod`, ...). Hosts: node_exporter. NICs: telegraf's infiniband_hw input.
Every target has Prometheus's own `up` and `scrape_duration_seconds`; scrapes jitter and fail now
and then; a host's exporters restart together once in a while (a gap of a few scrapes) while its NIC
counters are cleared (`perfquery -R`, a driver reload): a counter reset; a dead host leaves `up` 0 and nothing else (on Kubernetes its targets go away), or
comes back from a reboot with idle GPUs, a new boot time and its kernel counters from zero.
"""

from __future__ import annotations

import random
import subprocess
from collections import defaultdict
from pathlib import Path

import numpy as np

from bench.outside import _f_values as val
from bench.outside._f_plan import SKUS, Case
from bench.outside._f_values import Fleet

NIC_COUNT = 4


class Writer:
    """Collects series by metric family, then writes one OpenMetrics file."""

    def __init__(self, ext: dict[str, str]) -> None:
        self.ext = ext
        self.types: dict[str, str] = {}
        self.lines: dict[str, list[str]] = defaultdict(list)
        self.samples = 0

    def add(
        self, name: str, kind: str, labels: dict[str, str], times: np.ndarray, values: np.ndarray
    ) -> None:
        family = name[:-6] if kind == "counter" and name.endswith("_total") else name
        self.types[family] = kind
        lab = ",".join(f'{k}="{v}"' for k, v in sorted({**labels, **self.ext}.items()))
        out = self.lines[family]
        out.extend(f"{name}{{{lab}}} {v:.10g} {t:.3f}\n" for t, v in zip(times, values, strict=True))
        self.samples += len(times)

    def write(self, path: Path) -> None:
        with path.open("w") as fh:
            for family, rows in self.lines.items():
                fh.write(f"# TYPE {family} {self.types[family]}\n")
                fh.writelines(rows)
            fh.write("# EOF\n")


def _ip(case_seed: int, hi: int) -> str:
    return f"10.{(case_seed * 7) % 200 + 20}.{hi // 200 + 1}.{hi % 200 + 10}"


def scrape_times(rng: random.Random, t0: float, t1: float, every: int) -> np.ndarray:
    """One target's scrape times: a fixed phase, a few ms to a few hundred ms of jitter."""
    base = np.arange(t0 + rng.uniform(0, every), t1, every)
    return np.round(base + np.random.default_rng(rng.randrange(1 << 30)).normal(0, 0.05, len(base)), 3)


def _target(
    fl: Fleet, w: Writer, host: str, kind: str, labels: dict[str, str], times: np.ndarray, rng: random.Random
) -> tuple[np.ndarray, np.ndarray]:
    """Write `up` and the scrape duration; return the mask of scrapes that succeeded and the freeze index."""
    eff = fl.eff
    ok = np.random.default_rng(rng.randrange(1 << 30)).random(len(times)) > 0.003
    seen = np.ones(len(times), dtype=bool)
    if host in eff.dead:
        down, back = eff.dead[host], eff.back.get(host, np.inf)
        ok &= (times < down) | (times >= back)
        if fl.case.k8s:  # the node's pods leave the endpoints: the target itself goes away
            seen = (times < down + rng.uniform(60, 300)) | (times >= back)
    restart = eff.exporter_restart.get(host)
    if restart and kind in ("node", "telegraf"):
        ok &= ~((times >= restart) & (times < restart + 2.5 * (times[1] - times[0])))
    dur = np.abs(
        np.random.default_rng(rng.randrange(1 << 30)).normal(
            0.25 if kind == "gpu" else 0.05, 0.03, len(times)
        )
    )
    if host in eff.driver and kind == "gpu":
        bad = times >= eff.driver[host]
        drop = np.random.default_rng(rng.randrange(1 << 30)).random(len(times)) < 0.35
        ok &= ~(bad & drop)
        dur = np.where(bad, np.random.default_rng(rng.randrange(1 << 30)).uniform(6.5, 9.9, len(times)), dur)
    frozen = np.arange(len(times))
    ghost = eff.ghost.get(host)
    if ghost and ghost[1] == kind:
        first = int(np.searchsorted(times, ghost[0]))
        frozen = np.where(np.arange(len(times)) >= first, max(first - 1, 0), frozen)
    w.add("up", "gauge", labels, times[seen], ok[seen].astype(float))
    w.add("scrape_duration_seconds", "gauge", labels, times[ok], np.round(dur[frozen][ok], 6))
    return ok, frozen


def _reset(values: np.ndarray, times: np.ndarray, at: float | None) -> np.ndarray:
    if at is None:
        return values
    after = times >= at
    if not after.any():
        return values
    base = values[after][0]
    return np.where(after, values - base, values)


def gpu_target(fl: Fleet, w: Writer, hi: int, rng: random.Random) -> None:
    """One host's GPU exporter."""
    case = fl.case
    host = case.hosts[hi]
    times = scrape_times(rng, fl.tl.t0, fl.tl.t1, case.scrape)
    dcgm = case.gpu_exp == "dcgm"
    if dcgm:
        port, job = 9400, ("nvidia-dcgm-exporter" if case.k8s else "dcgm")
        inst = f"{_ip(case.seed, hi)}:{port}" if case.k8s else f"{host}:{port}"
    else:
        inst, job = f"{host}:9835", "nvidia_gpu_exporter"
    tlabels = {"instance": inst, "job": job}
    if dcgm and case.k8s:
        suffix = "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        tlabels.update(
            namespace="gpu-operator",
            pod=f"nvidia-dcgm-exporter-{suffix}",
            container="nvidia-dcgm-exporter",
            service="nvidia-dcgm-exporter",
            endpoint="gpu-metrics",
        )
    ok, frozen = _target(fl, w, host, "gpu", tlabels, times, rng)
    name, *_ = SKUS[case.sku[hi]]
    show_index = rng.random() < 0.7
    t = times[ok]
    for g in range(case.gpus):
        v = val.gpu(fl, hi, g, times, rng)
        uuid = (
            f"GPU-{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}-"
            f"{rng.getrandbits(16):04x}-{rng.getrandbits(48):012x}"
        )

        def put(metric: str, kind: str, values: np.ndarray, labels: dict[str, str]) -> None:
            w.add(metric, kind, labels, t, values[frozen][ok])

        if dcgm:
            lab = {
                **tlabels,
                "gpu": str(g),
                "UUID": uuid,
                "device": f"nvidia{g}",
                "modelName": name,
                case.host_label: host,
                "DCGM_FI_DRIVER_VERSION": "550.90.07",
            }
            if case.k8s:
                lab.update(
                    exported_pod=pod_name(case, hi), exported_namespace="train", exported_container="pytorch"
                )
            put("DCGM_FI_DEV_GPU_UTIL", "gauge", np.round(v["util"] * 100), lab)
            put("DCGM_FI_DEV_POWER_USAGE", "gauge", np.round(v["power"], 3), lab)
            put("DCGM_FI_DEV_GPU_TEMP", "gauge", v["temp"], lab)
            put("DCGM_FI_DEV_SM_CLOCK", "gauge", v["clock"], lab)
            put("DCGM_FI_DEV_FB_USED", "gauge", np.round(v["mem"] / 2**20), lab)
            put("DCGM_FI_DEV_XID_ERRORS", "gauge", v["xid"], lab)
            put("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "gauge", v["sbe"], lab)
            put("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "gauge", v["dbe"], lab)
        else:
            lab = {**tlabels, "uuid": uuid}
            info = {
                **lab,
                "name": name,
                "driver_version": "550.90.07",
                "vbios_version": "96.00.99.00.01",
                "pci_bus_id": f"00000000:{0x18 + 0x10 * g:02X}:00.0",
                "compute_cap": "9.0",
            }
            if show_index:
                info["index"] = str(g)
            put("nvidia_smi_gpu_info", "gauge", np.ones(len(times)), info)
            put("nvidia_smi_index", "gauge", np.full(len(times), float(g)), lab)
            put("nvidia_smi_utilization_gpu_ratio", "gauge", np.round(v["util"], 2), lab)
            put("nvidia_smi_power_draw_watts", "gauge", np.round(v["power"], 2), lab)
            put("nvidia_smi_temperature_gpu", "gauge", v["temp"], lab)
            put("nvidia_smi_clocks_current_sm_clock_hz", "gauge", v["clock"] * 1e6, lab)
            put("nvidia_smi_memory_used_bytes", "gauge", v["mem"], lab)
            put("nvidia_smi_ecc_errors_corrected_volatile_total", "gauge", v["sbe"], lab)
            put("nvidia_smi_ecc_errors_uncorrected_volatile_total", "gauge", v["dbe"], lab)


def pod_name(case: Case, hi: int) -> str:
    """The training pod on host `hi` (PyTorchJob: master-0, worker-N; JobSet: <name>-workers-0-N)."""
    job = f"{case.model.replace('.', '-')}-{case.seed}{case.index:02d}"
    if case.index % 2:
        return f"{job}-workers-0-{hi}-{(case.seed * 31 + hi * 7) % 97:02d}x{hi % 10}q"
    return f"{job}-master-0" if hi == 0 else f"{job}-worker-{hi - 1}"


def node_target(fl: Fleet, w: Writer, hi: int, rng: random.Random) -> None:
    """One host's node_exporter and its telegraf (InfiniBand hw counters)."""
    case = fl.case
    host = case.hosts[hi]
    times = scrape_times(rng, fl.tl.t0, fl.tl.t1, case.node_scrape)
    if case.k8s:
        tl = {
            "instance": f"{_ip(case.seed, hi)}:9100",
            "job": "node-exporter",
            "namespace": "monitoring",
            "pod": f"kps-prometheus-node-exporter-{rng.getrandbits(20):05x}",
            "service": "kps-prometheus-node-exporter",
            "container": "node-exporter",
            "endpoint": "http-metrics",
        }
        if case.index % 3:
            tl["node"] = host
    else:
        tl = {"instance": f"{host}:9100", "job": "node"}
    ok, frozen = _target(fl, w, host, "node", tl, times, rng)
    v = val.node(fl, hi, times, rng)
    t = times[ok]
    for metric, kind, key in (
        ("node_procs_running", "gauge", "procs"),
        ("node_load1", "gauge", "load1"),
        ("node_memory_MemAvailable_bytes", "gauge", "mem_avail"),
        ("node_vmstat_oom_kill", "unknown", "oom"),
        ("node_netstat_Tcp_RetransSegs", "unknown", "retrans"),
    ):
        w.add(metric, kind, tl, t, np.round(v[key][frozen][ok], 1))
    w.add("node_memory_MemTotal_bytes", "gauge", tl, t, np.full(len(t), fl.mem_total))
    boot = fl.tl.t0 - 86400 * (3 + hi % 17)
    back = fl.eff.back.get(host)
    w.add("node_boot_time_seconds", "gauge", tl, t, np.where(t >= (back or np.inf), (back or 0) - 75, boot))
    w.add(
        "node_network_transmit_bytes_total",
        "counter",
        {**tl, "device": "eth0"},
        t,
        v["tx"][frozen][ok],
    )
    uname = {
        **tl,
        "nodename": host.split(".")[0] if rng.random() < 0.3 else host,
        "release": "5.15.0-118-generic",
        "sysname": "Linux",
        "machine": "x86_64",
        "domainname": "(none)",
        "version": "#128-Ubuntu SMP",
    }
    w.add("node_uname_info", "gauge", uname, t, np.ones(len(t)))
    _telegraf(fl, w, hi, rng)


def _telegraf(fl: Fleet, w: Writer, hi: int, rng: random.Random) -> None:
    case = fl.case
    host = case.hosts[hi]
    times = scrape_times(rng, fl.tl.t0, fl.tl.t1, max(case.node_scrape, 10))
    tl = {"instance": f"{host if not case.k8s else _ip(case.seed, hi)}:9273", "job": "telegraf"}
    ok, frozen = _target(fl, w, host, "telegraf", tl, times, rng)
    restart = fl.eff.exporter_restart.get(host)
    t = times[ok]
    for k in range(NIC_COUNT):
        v = val.nic(fl, hi, k, times, rng)
        lab = {**tl, "host": host, "device": f"mlx5_{k}", "port": "1"}
        for counter in ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err"):
            w.add(
                f"infiniband_hw_{counter}", "unknown", lab, t, _reset(v[counter], times, restart)[frozen][ok]
            )
        w.add("infiniband_port_xmit_data", "unknown", lab, t, v["xmit_bytes"][frozen][ok])


def promtool(om: Path, out: Path) -> None:
    """Build TSDB blocks from the OpenMetrics file (then drop the text)."""
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(out)],
        check=True,
        capture_output=True,
    )
    om.unlink()
