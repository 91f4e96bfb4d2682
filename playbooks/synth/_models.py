"""GPU models, host naming and scenario declarations used by the incident-job generator.

Everything here is data. The numbers are priors for *generated* jobs: they differ per GPU model on
purpose, so that the diagnosis cannot rely on one fixed wattage or temperature.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    """Typical operating points of one GPU model.

    Attributes:
        name: marketing name (MI355X, H100, ...).
        vendor: "amd" or "nvidia".
        active_w: mean board power while training.
        busy_wait_w: power while spinning in a collective (NCCL/RCCL busy-wait).
        idle_w: power with nothing running.
        temp_active_c: junction/core temperature while training.
        temp_idle_c: temperature when idle.
        clock_mhz: nominal core clock while training.
        mem_clock_mhz: memory clock.
        vram_bytes: memory per GPU.
        dcgm_model_name: the modelName label DCGM exporter gives it.
    """

    name: str
    vendor: str
    active_w: float
    busy_wait_w: float
    idle_w: float
    temp_active_c: float
    temp_idle_c: float
    clock_mhz: float
    mem_clock_mhz: float
    vram_bytes: float
    dcgm_model_name: str = ""


GIB = 1024.0**3

GPU_MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        GpuModel("MI355X", "amd", 905.0, 302.0, 260.0, 74.0, 41.0, 2400.0, 2000.0, 288 * GIB),
        GpuModel("MI300X", "amd", 640.0, 178.0, 132.0, 68.0, 38.0, 2100.0, 1300.0, 192 * GIB),
        GpuModel(
            "H100",
            "nvidia",
            610.0,
            118.0,
            72.0,
            62.0,
            33.0,
            1980.0,
            2619.0,
            80 * GIB,
            "NVIDIA H100 80GB HBM3",
        ),
        GpuModel("H200", "nvidia", 640.0, 124.0, 78.0, 60.0, 32.0, 1980.0, 3201.0, 141 * GIB, "NVIDIA H200"),
        GpuModel(
            "A100", "nvidia", 335.0, 88.0, 56.0, 58.0, 31.0, 1410.0, 1593.0, 80 * GIB, "NVIDIA A100-SXM4-80GB"
        ),
        GpuModel("B200", "nvidia", 905.0, 240.0, 140.0, 64.0, 34.0, 1965.0, 3996.0, 180 * GIB, "NVIDIA B200"),
    )
}

VENDOR_MODELS = {
    "amd": ("MI355X", "MI300X"),
    "nvidia": ("H100", "H200", "A100", "B200"),
}

# Host naming schemes seen on real clusters; the seed picks one (and an offset), so that nothing
# downstream can rely on a particular pattern.
HOST_SCHEMES = (
    ("gpu-{n:03d}", 101),
    ("node{n:04d}", 1),
    ("mi-r{rack:02d}-n{slot:02d}", 0),
    ("dgx{n:03d}", 1),
    ("a{rack}c{slot:02d}-gpu", 0),
    ("tx-hpc-{n:04d}", 200),
)

MODEL_NAMES = ("llama2-70b", "llama3.1-405b", "mixtral-8x22b", "deepseek-v3-mini", "llama3-8b", "gpt3-175b")


@dataclass(frozen=True)
class Scenario:
    """One incident scenario of the generator.

    Attributes:
        name: scenario name; equals the diagnosis class it produces (or "healthy").
        klass: contract CLASS of the truth.
        family: contract FAMILY of the truth.
        ending: how the job ends: "complete", "hang" (stalls, then cancelled) or "crash".
        triage_class: the seed triage table's primary class the log should produce (None when clean).
        status: the seed triage status of the log.
        description: what a user sees, one sentence.
    """

    name: str
    klass: str
    family: str
    ending: str
    triage_class: str | None
    status: str
    description: str


SCENARIO_TABLE: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "healthy",
            "healthy",
            "none",
            "complete",
            None,
            "completed",
            "Trains to the last step; only checkpoint spikes, warm-up and red herrings.",
        ),
        Scenario(
            "collective-hang",
            "collective-hang",
            "collective",
            "hang",
            "hang",
            "cancelled",
            "Steps stop; every GPU busy-waits at high utilisation and near-idle power; no trigger; "
            "cancelled after the hang.",
        ),
        Scenario(
            "network-hang",
            "network-hang",
            "network-rdma",
            "hang",
            "hang",
            "cancelled",
            "RDMA retransmits and ACK timeouts burst on one host, minutes later the collectives stall "
            "and every GPU busy-waits; cancelled.",
        ),
        Scenario(
            "node-death",
            "node-death",
            "node",
            "crash",
            "heartbeat-timeout",
            "failed",
            "One host dies (exporter gone, GPUs silent); the others hang until the coordinator kills "
            "the job for missed heartbeats.",
        ),
        Scenario(
            "heartbeat-false-positive",
            "heartbeat-false-positive",
            "heartbeat",
            "crash",
            "heartbeat-timeout",
            "failed",
            "The coordinator kills tasks for missed heartbeats while the accused hosts were training "
            "at full power.",
        ),
        Scenario(
            "host-oom",
            "host-oom",
            "host-memory",
            "crash",
            "oom-host",
            "failed",
            "A checkpoint save on a DP-replica-0 host exhausts host memory; the kernel OOM-kills the "
            "trainer and the job fails.",
        ),
        Scenario(
            "thermal-straggler",
            "thermal-straggler",
            "thermal",
            "complete",
            "tgs-degradation",
            "completed",
            "One GPU heats up, its core clock drops and the whole job slows down.",
        ),
        Scenario(
            "rdma-degradation",
            "rdma-degradation",
            "network-rdma",
            "complete",
            "tgs-degradation",
            "completed",
            "Sustained RDMA retransmits and ACK timeouts on a few hosts; step time up 20-30 %, no hang.",
        ),
        Scenario(
            "restore-resource-leak",
            "restore-resource-leak",
            "cpu-contention",
            "complete",
            None,
            "completed",
            "A job restored from a checkpoint carries ~17 extra runnable threads per host and ~1 % less "
            "throughput than a fresh start with the same config (two jobs).",
        ),
        Scenario(
            "monitoring-ghost-data",
            "monitoring-ghost-data",
            "monitoring",
            "complete",
            None,
            "completed",
            "One host's exporter loop hangs: its hardware values freeze (scrape duration flat) while "
            "the job trains on.",
        ),
        Scenario(
            "gpu-driver-fault",
            "gpu-driver-fault",
            "gpu-driver",
            "complete",
            None,
            "completed",
            "Driver errors on one host: dmesg GPU errors, scrape timeouts alternating, gaps in GPU "
            "metrics; training unaffected.",
        ),
        Scenario(
            "gpu-hardware-fault",
            "gpu-hardware-fault",
            "gpu-hardware",
            "crash",
            "signal-kill",
            "failed",
            "Uncorrectable ECC/RAS errors (Xid 48/79 on NVIDIA) on one GPU, then the trainer aborts.",
        ),
        Scenario(
            "training-instability",
            "training-instability",
            "training",
            "complete",
            None,
            "completed",
            "Gradient norm and loss (and MoE load-balance loss) move first; utilisation spread and "
            "throughput follow.",
        ),
    )
}

SCENARIOS: tuple[str, ...] = tuple(SCENARIO_TABLE)
