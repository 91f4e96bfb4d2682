"""How a generated job's exporters are deployed: the variants real clusters show, varied by seed.

`Exporters` names one deployment (dcgm-exporter's host label, Kubernetes labels, scrape job names,
node_exporter scraped by address, a stale Xid, remapped-row fields instead of ECC counters, node_exporter
>= 1.11 RDMA counters, DCGM's 30 s collection under a 15 s scrape, an exporter that comes up late, a
restarted exporter pod that renames its host, background counter noise, relabelled hosts, AMD's
device-metrics-exporter with its field prefix, a trainer whose step gauge is refreshed less often than
steps complete, a node shared with another tenant whose GPUs stay busy at a steady partial load, a
Prometheus restart that stores no sample of any series for a few minutes; the trainer's own log habits: a
step line every Nth step, Ray Train's or absl's end-of-training line). `Exporters.random(seed)` draws one;
`Exporters.named(...)` gives a perturbation of the robustness bench by name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np

from ._neighbour import add_neighbour
from ._sim_plan import Job

__all__ = ["PERTURBATIONS", "Exporters", "apply_to_job"]


@dataclass(frozen=True)
class Exporters:
    """One deployment of a job's exporters (the defaults are the plain deployment every test knew).

    Attributes:
        gpu: "dcgm" (NVIDIA dcgm-exporter), "nvsmi" (utkuozdemir/nvidia_gpu_exporter: `nvidia_smi_*` with a
            `uuid` label only, no host label), "amd-dme" (AMD device-metrics-exporter) or "none" (no GPU
            exporter was deployed: node_exporter and the trainer only); the seed system ignores these options.
        gpu_host_label: the GPU exporter's host label: "Hostname" (dcgm-exporter releases), "hostname"
            (its HEAD, AMD's exporter), "" (`--no-hostname`: only `instance` names the target).
        kubernetes: scraped by kube-prometheus-stack: `pod`/`namespace`/`container`/`service`/`endpoint`
            on every target, the GPU workload's own as `exported_*`, DCGM scraped at its pod IP.
        node_job, gpu_job: the deployer's scrape job names.
        node_by_address: node_exporter's `instance` is `IP:9100` (node_uname_info{nodename} names the host).
        stale_xid: one GPU holds an Xid from before the job for the whole job (DCGM keeps the last one).
        ecc: "dbe" (ECC SBE/DBE volatile totals) or "remapped" (the default counter set: row remapping).
        rdma_hw_counters: node_exporter >= 1.11: RoCE retransmits, ACK timeouts, CNP, sequence errors.
        gpu_collect_s: the GPU exporter's collection interval; above the scrape interval values repeat.
        gpu_late_scrapes: the GPU exporter comes up this many scrapes after the others.
        hostname_change: one GPU exporter pod is restarted mid-job and reports another host label value
            under the same `instance` (its pod name before, the node name after).
        counter_noise: background RDMA retransmits/ACK timeouts: a few to tens of packets on ~1 % of
            scrapes per NIC, on every host.
        host_domain: relabelled hosts: every host name gets this DNS suffix (log, TSDB and truth alike).
        node_domain: node_exporter alone knows the hosts by their FQDN (this DNS suffix): it is scraped at
            `host.domain:9100` and node_uname_info's nodename is the FQDN, while the scheduler and the GPU
            exporter's host label use the short name (the truth's).
        prefix: AMD device-metrics-exporter field prefix ("amd_").
        failed_scrapes: the chance of each scrape of the GPU exporter to fail at random, on every host
            (a timed-out scrape: `up` 0, `scrape_duration_seconds` the timeout, no samples stored).
        noisy_host: one host's NIC retransmits a few packets on one scrape in ten for the whole job: a
            harmless trickle (no change point, a negligible share of its traffic), stronger than the others'.
        step_poll_s: the trainer's exporter refreshes its training_* gauges only every this many seconds
            (slower than steps complete), so the step gauge stops up to this long before the log's last step.
        trainer_gauges: the trainer exports its training_* gauges; without them the log alone tells the steps
            and the loss (many trainers export none).
        gpu_util_field: DCGM's utilisation field: "util" (DCGM_FI_DEV_GPU_UTIL, percent) or "profiling"
            (a counter set of profiling fields only: DCGM_FI_PROF_GR_ENGINE_ACTIVE, a 0-1 ratio).
        symbol_errors: node_exporter's InfiniBand port counters include symbol errors (minor errors on the
            physical lanes), which a bad link counts along with its retransmits; healthy links count none.
        rdma_textfile: a node_exporter textfile collector exports the ports' hw_counters files under their
            own names (`node_rdma_hw_local_ack_timeout_err_total`, `..._packet_seq_err_total`, ...).
        rdma_textfile_names: how that collector names a hw_counters file: a format with `{}` for the file
            (`node_rdma_hw_{}_total`; `mlx5_hw_counters_{}`, `node_ethtool_{}`, ... of other collectors).
        neighbour_gpus: another tenant's GPUs on every host (a node shared between jobs), beside the job's.
        neighbour_load: "steady" (each at its own partial load) or "varying" (the tenant's own job wanders
            and steps: its GPUs heat, cool and change clock whatever the job does).
        neighbour_layout: "after" (the tenant's indices follow the job's) or "scattered" (on some hosts the
            job holds another subset of the node's indices, and on some nobody else runs: those GPUs idle).
        node_stat: node_exporter runs its `stat` collector (context switches); off where a deployment enables
            only a chosen few collectors.
        node_netdev_bytes: node_exporter exports the bytes each interface sent
            (`node_network_transmit_bytes_total{device="eth0"}`: its own scrape answers, logs, checkpoints).
        log_every: the trainer prints its step line every this many steps (step % N == 0: Megatron's and
            torchtitan's log interval) and trains quietly between: the last printed step is a lower bound.
        trainer_end: the end-of-training line the trainer's driver writes: "" (none but the seed's summary),
            "ray-train" (Ray Train's ``Training completed|errored after N iterations at <time>. Total running
            time: ...``) or "absl" (an absl/JAX trainer's ``Training finished.`` when the run completes).
        monitoring_outage: Prometheus itself restarts once: for 2-4 minutes (at a seeded time, before or
            during the incident, never over its onset nor over all of it) no series of any target has a
            sample, not even `up`; the job and its log go on.
    """

    gpu: str = "dcgm"
    gpu_host_label: str = "Hostname"
    kubernetes: bool = False
    node_job: str = "node"
    gpu_job: str = "dcgm-exporter"
    node_by_address: bool = False
    stale_xid: bool = False
    ecc: str = "dbe"
    rdma_hw_counters: bool = False
    gpu_collect_s: float = 0.0
    gpu_late_scrapes: int = 0
    hostname_change: bool = False
    counter_noise: bool = False
    host_domain: str = ""
    node_domain: str = ""
    prefix: str = ""
    failed_scrapes: float = 0.0
    step_poll_s: float = 0.0
    noisy_host: bool = False
    trainer_gauges: bool = True
    gpu_util_field: str = "util"
    symbol_errors: bool = False
    rdma_textfile: bool = False
    rdma_textfile_names: str = "node_rdma_hw_{}_total"
    neighbour_gpus: int = 0
    neighbour_load: str = "steady"
    neighbour_layout: str = "after"
    node_stat: bool = True
    node_netdev_bytes: bool = False
    log_every: int = 1
    trainer_end: str = ""
    monitoring_outage: bool = False

    def __post_init__(self) -> None:
        if self.gpu not in ("dcgm", "nvsmi", "amd-dme", "none"):
            raise ValueError(f"unknown GPU exporter {self.gpu!r} (dcgm, nvsmi, amd-dme, none)")
        if self.gpu_host_label not in ("Hostname", "hostname", ""):
            raise ValueError(f"unknown GPU host label {self.gpu_host_label!r} (Hostname, hostname or '')")
        if self.gpu_util_field not in ("util", "profiling"):
            raise ValueError(f"unknown GPU utilisation field {self.gpu_util_field!r} (util, profiling)")
        if self.neighbour_load not in ("steady", "varying"):
            raise ValueError(f"unknown neighbour load {self.neighbour_load!r} (steady, varying)")
        if self.neighbour_layout not in ("after", "scattered"):
            raise ValueError(f"unknown neighbour layout {self.neighbour_layout!r} (after, scattered)")
        if self.rdma_textfile_names.count("{}") != 1:
            raise ValueError(
                f"rdma_textfile_names needs one {{}} for the counter: {self.rdma_textfile_names!r}"
            )
        if self.log_every < 1:
            raise ValueError(f"log_every must be at least 1: {self.log_every!r}")
        if self.trainer_end not in ("", "ray-train", "absl"):
            raise ValueError(f"unknown trainer end {self.trainer_end!r} ('', ray-train, absl)")
        if self.ecc not in ("dbe", "remapped"):
            raise ValueError(f"unknown ECC field set {self.ecc!r} (dbe, remapped)")
        if self.gpu == "nvsmi":
            # nvidia_gpu_exporter has no host label: its `instance` (the node's name, or its address when
            # node_exporter is scraped by address too) names the target
            object.__setattr__(self, "gpu_host_label", "")
        elif not self.gpu_host_label:
            # without a host label only addresses meet: node_exporter must be scraped by address too
            object.__setattr__(self, "node_by_address", True)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Exporters:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (d or {}).items() if k in known})

    @classmethod
    def random(cls, seed: int, *, gpu: str = "dcgm") -> Exporters:
        """Return a deployment drawn from the variants seen in the field, reproducible by seed."""
        rng = np.random.default_rng([seed, 4242])
        k8s = bool(rng.random() < 0.4)
        return cls(
            gpu=gpu,
            gpu_host_label=str(
                rng.choice(["Hostname", "hostname", ""] if gpu == "dcgm" else ["hostname", ""])
            ),
            kubernetes=k8s,
            node_job=str(rng.choice(["node", "node-exporter", "prometheus-node-exporter", "nodes"])),
            gpu_job=str(
                rng.choice(
                    ["dcgm-exporter", "nvidia-dcgm-exporter", "gpu-metrics"]
                    if gpu == "dcgm"
                    else ["amd-device-metrics-exporter", "gpu-metrics"]
                )
            ),
            node_by_address=bool(k8s or rng.random() < 0.5),
            stale_xid=bool(rng.random() < 0.3),
            ecc=str(rng.choice(["dbe", "remapped"])),
            rdma_hw_counters=bool(rng.random() < 0.5),
            gpu_collect_s=float(rng.choice([0.0, 30.0])),
            gpu_late_scrapes=int(rng.choice([0, 0, 1])),
            counter_noise=True,
            prefix=str(rng.choice(["", "amd_"])) if gpu == "amd-dme" else "",
            step_poll_s=float(rng.choice([0.0, 0.0, 300.0, 600.0])),
        )

    @classmethod
    def named(cls, name: str, *, gpu: str = "dcgm") -> Exporters:
        """Return the robustness bench's perturbation `name` (see PERTURBATIONS) of the plain deployment."""
        if name not in PERTURBATIONS:
            raise ValueError(f"unknown perturbation {name!r}; known: {', '.join(PERTURBATIONS)}")
        return replace(
            cls(
                gpu=gpu,
                gpu_job="dcgm-exporter" if gpu == "dcgm" else "amd-device-metrics-exporter",
                gpu_host_label="Hostname" if gpu == "dcgm" else "hostname",
            ),
            **PERTURBATIONS[name],
        )


#: The robustness bench's perturbations: option changes applied to the plain deployment.
PERTURBATIONS: dict[str, dict[str, Any]] = {
    "plain": {},
    "relabelled-hosts": {"host_domain": ".cluster.internal"},
    "fqdn-node-exporter": {"node_domain": ".cluster.internal"},
    "renamed-jobs": {"node_job": "prometheus-node-exporter", "gpu_job": "gpu-metrics"},
    "kubernetes": {"kubernetes": True, "node_by_address": True, "gpu_host_label": "hostname"},
    "no-hostname": {"gpu_host_label": ""},
    "counter-noise": {"counter_noise": True},
    "late-exporter": {"gpu_late_scrapes": 1},
    "dcgm-30s": {"gpu_collect_s": 30.0},
    "lagging-gauge": {"step_poll_s": 600.0},
    "no-trainer-gauges": {"trainer_gauges": False},
    "dcgm-profiling": {"gpu_util_field": "profiling"},
    "red-herrings": {"stale_xid": True, "counter_noise": True, "noisy_host": True},
    "shared-node": {"neighbour_gpus": 4},
    "few-node-collectors": {"node_stat": False, "node_netdev_bytes": True},
    "shared-node-varying": {
        "neighbour_gpus": 4,
        "neighbour_load": "varying",
        "neighbour_layout": "scattered",
    },
    "log-every-10": {"log_every": 10},
    "log-every-10-no-gauges": {"log_every": 10, "trainer_gauges": False},
    "ray-train-end": {"trainer_end": "ray-train"},
    "absl-end": {"trainer_end": "absl"},
    "prometheus-outage": {"monitoring_outage": True},
}


def apply_to_job(job: Job, ex: Exporters) -> None:
    """Change the simulated job where the deployment changes what the exporters read (before emitting).

    Host names (host_domain) must be applied before simulation by the caller; here: background counter
    noise, the stale Xid, a neighbour tenant's GPUs (after the log is written: the job knows only its own).
    """
    rng = np.random.default_rng([job.seed, 777])
    if ex.counter_noise:
        for key in ("retx", "ack"):
            arr = job.nic_sig[key]
            hits = rng.random(arr.shape) < 0.01
            size = rng.integers(3, 40 if key == "retx" else 6, arr.shape)
            job.nic_sig[key] = arr + np.cumsum(np.where(hits, size, 0), axis=-1)
        job.notes.append("background RDMA retransmit/ACK-timeout noise on ~1 % of scrapes per NIC")
    if ex.failed_scrapes > 0:
        failed = np.random.default_rng([job.seed, 91]).random(job.gpu_present.shape) < ex.failed_scrapes
        job.gpu_present = job.gpu_present & ~failed
        job.failed_scrape_mask = failed
        job.notes.append(
            f"{ex.failed_scrapes:.1%} of the GPU exporter's scrapes fail at random on every host"
        )
    if ex.noisy_host:
        h, arr = int(rng.integers(job.nodes)), job.nic_sig["retx"]
        hits = rng.random(int(arr.shape[-1])) < 0.1
        arr[h, 0] = arr[h, 0] + np.cumsum(np.where(hits, rng.integers(1, 8, arr.shape[-1]), 0))
        job.red_herrings["retransmit_trickle_host"] = job.hosts[h]
    if ex.stale_xid and "xid" in job.gpu_sig:
        h, g = int(rng.integers(job.nodes)), int(rng.integers(job.gpus))
        xid = job.gpu_sig["xid"]
        if not xid[h, g].any():
            xid[h, g] = float(rng.choice([31, 43, 79]))
            job.red_herrings["stale_xid"] = f"{job.hosts[h]}:{g}"
            job.notes.append(f"GPU {g} of {job.hosts[h]} holds an Xid from before the job (stale)")
    if ex.neighbour_gpus > 0:
        add_neighbour(job, ex.neighbour_gpus, load=ex.neighbour_load, layout=ex.neighbour_layout)
    if ex.monitoring_outage and (window := outage_window(job)) is not None:
        job.monitoring_outage = window
        job.red_herrings["monitoring_outage"] = [round(window[0], 3), round(window[1], 3)]
        job.notes.append(f"Prometheus restarted: no sample of any series for {window[1] - window[0]:.0f} s")


def outage_window(job: Job) -> tuple[float, float] | None:
    """Return (start, end) of a seeded 2-4 minute monitoring outage: before the incident's onset or during
    the incident (after its onset, ending before its last evidence), anywhere in a healthy job; None when
    the job leaves no room for one that hides neither the onset nor all of the incident."""
    rng = np.random.default_rng([job.seed, 4711])
    iv = job.interval
    dur = float(rng.uniform(120.0, 240.0))
    first = float(job.t[0]) + 4 * iv
    last = min(float(job.t[-1]), job.crash_time if job.crash_time is not None else job.job_end) - 4 * iv
    spans = [(first, last - dur)]
    if job.onset is not None:
        # before: ends two scrapes before the onset; during: starts two scrapes after it
        spans = [(first, job.onset - 2 * iv - dur), (job.onset + 2 * iv, last - dur)]
        if rng.random() < 0.5:
            spans.reverse()
    spans = [s for s in spans if s[1] > s[0]]
    if not spans:
        return None
    start = float(rng.uniform(*spans[0]))
    return start, start + dur


def hold(values: np.ndarray, interval: float, collect_s: float, phase: int) -> np.ndarray:
    """Return values as an exporter collecting every `collect_s` reports them at each scrape (repeats)."""
    r = int(round(collect_s / interval)) if collect_s > interval else 1
    if r <= 1:
        return values
    idx = np.arange(values.shape[-1])
    src = np.maximum(0, ((idx + phase) // r) * r - phase)
    return values[..., src]
