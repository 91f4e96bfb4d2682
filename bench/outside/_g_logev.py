"""Corpus G's log events and endings (#10): Xid lines, NCCL errors, watchdog timeouts, OOM kills, node
failures, Ray's dead-node verdicts, a NaN loss, and how each launcher reports the end of the job."""

from __future__ import annotations

from bench.outside._g_fleet import pci_bus
from bench.outside._g_log import Log, header, steps
from bench.outside._g_node import mem_total

XID_TEXT = {
    79: "GPU has fallen off the bus.",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 2, subpartition 0.",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU{g} GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801348 0x4).",
    109: "Ch 00000010, errorString CTX SWITCH TIMEOUT, Info 0x2c014",
}


def _xid(lg: Log, t: float, h: int, d: dict) -> None:
    g, code = d["gpu"], d["xid"]
    bus = pci_bus(lg.fl, g, nvrm=True)
    msg = XID_TEXT.get(code, "").format(g=g)
    line = f"{lg.clock.dmesg(t)} NVRM: Xid (PCI:{bus}): {code}, pid={lg.pids[h] + g}, name=python3, {msg}"
    lg.st.extra.setdefault("dmesg", {}).setdefault(h, []).append(line)
    if code == 48 or code == 95:
        lg.st.extra["dmesg"][h].append(
            f"{lg.clock.dmesg(t + 1)} NVRM: GPU at PCI:{bus}: GPU-{g} has a pending row remapping"
        )


def _watchdog(lg: Log, t: float, d: dict) -> None:
    st, fl = lg.st, lg.fl
    g = len(fl.owned)
    seq = 20000 + int((d["since"] - st.tl.t_train) / max(st.tl.step_s, 0.5)) * 24
    if not len(st.tl.step_t):  # stuck in the first collectives (init barrier, first all-reduce)
        seq = 2 + len(fl.hosts) % 5
    odd = {h for h, s in st.eff.hang_sets.items() if s and set(s) != set(fl.owned)}
    for h in sorted({0, 1, len(fl.hosts) - 1} | odd):
        if h >= len(fl.hosts) or h in st.eff.dead:
            continue
        for lr in (0, g - 1):
            rank = h * g + lr
            last = seq - 1 if h in odd else seq
            ms = st.nccl_timeout_ms
            head = f"[rank{rank}]:[{lg.clock.glog(t, 'E')}000 ProcessGroupNCCL.cpp:616]"
            pre = f"{h}: " if fl.log == "torchrun" else ""
            lg.raw(
                t,
                f"{pre}{head} [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
                f"OpType=ALLREDUCE, NumelIn=33554432, NumelOut=33554432, Timeout(ms)={ms}) ran for {ms + 37} "
                "milliseconds before timing out.",
            )
            lg.raw(
                t + 0.01,
                f"{pre}[rank{rank}]:[{lg.clock.glog(t, 'E')}000 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) "
                f"Rank {rank}] Exception (either an error or timeout) detected by watchdog at work: {seq}, "
                f"last enqueued NCCL work: {seq + 1}, last completed NCCL work: {last - 1}.",
            )
    _agent_fail(lg, t + 2, 0, -6, "Signal 6 (SIGABRT) received by PID")


def _agent_fail(lg: Log, t: float, h: int, code: int, why: str) -> None:
    fl = lg.fl
    host = fl.hosts[h]
    pid = lg.pids[h]
    if fl.log == "raytrain":
        lg.raw(
            t,
            f"{lg.clock.pylog(t)}\tERROR tune_controller.py:1331 -- Trial task failed for trial TorchTrainer_{pid:05x}",
        )
        lg.raw(
            t + 0.1,
            f"ray.exceptions.RayTaskError(RuntimeError): ray::_Inner.train() (pid={pid}, ip={host.ip}) "
            f"exitcode {code} on {host.name}: {why}",
        )
        return
    pre = f"{h}: " if fl.log == "torchrun" else ""
    lg.raw(
        t,
        f"{pre}E{lg.clock.local(t):%m%d %H:%M:%S}.{int(t * 1e6) % 1000000:06d} {pid} torch/distributed/elastic/multiprocessing/"
        f"api.py:869] failed (exitcode: {code}) local_rank: 0 (pid: {pid + 1}) of binary: /usr/bin/python3",
    )
    lg.raw(t + 0.2, f"{pre}torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ")
    for i, line in enumerate(
        [
            "============================================================",
            "train.py FAILED",
            "------------------------------------------------------------",
            "Root Cause (first observed failure):",
            "[0]:",
            f"  time      : {lg.clock.local(t):%Y-%m-%d_%H:%M:%S}",
            f"  host      : {host.fqdn}",
            f"  rank      : {h * len(fl.owned)} (local_rank: 0)",
            f"  exitcode  : {code} (pid: {pid + 1})",
            "  error_file: <N/A>",
            f"  traceback : {why} {pid + 1}"
            if code < 0
            else "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
            "============================================================",
        ]
    ):
        lg.raw(t + 0.2 + i * 1e-4, f"{pre}{line}")


def _event(lg: Log, t: float, h: int | None, kind: str, d: dict) -> None:
    fl = lg.fl
    if kind == "xid":
        _xid(lg, t, h, d)
    elif kind == "nccl_ib_error":
        peer = fl.hosts[(h + 1) % len(fl.hosts)]
        me = fl.hosts[h]
        if fl.rdma == "efa":
            msg = (
                "NCCL WARN NET/OFI Request 0x7f3a2c0 completed with error. RC: 15. Error: 110 (Connection timed out). "
                f"Completed length: 0, Request: {{ dev: 1, size: 524288, state: CREATED, type: SEND }} peer {peer.ip}"
            )
        else:
            msg = (
                f"NCCL WARN NET/IB : Got completion from peer {peer.ip}<{40000 + h}> with status=12 opcode=0 len=0 "
                f"vendor err 129 (Send) localGid ::ffff:{me.ip} remoteGids::ffff:{peer.ip}"
            )
        for j in range(3):
            lg.nccl(t + j * 0.7, h, j, msg)
        lg.nccl(t + 2.2, h, 0, "NCCL INFO transport/net.cc:1298 -> 6")
    elif kind == "nccl_watchdog":
        _watchdog(lg, t, d)
    elif kind == "cancel":
        if fl.log == "torchrun":
            lg.raw(
                t,
                f"slurmstepd: error: *** STEP 0 ON {fl.hosts[0].name} CANCELLED AT "
                f"{lg.clock.local(t):%Y-%m-%dT%H:%M:%S} ***",
            )
        else:
            lg.app(t, "Received SIGTERM, shutting down (job deleted by user)", "WARNING")
    elif kind == "node_fail":
        _node_fail(lg, t, h)
    elif kind == "oom_kill":
        _oom(lg, t, h)
    elif kind == "hb_dead":
        host = fl.hosts[h]
        lg.raw(
            t,
            f"{lg.clock.pylog(t)}\tWARNING worker.py:2452 -- The node with node id: {lg.rng.getrandbits(112):028x} "
            f"and address: {host.ip} and node name: {host.name} has been marked dead because the detector has "
            "missed too many heartbeats from it. This can happen when a \t(1) raylet crashes unexpectedly (OOMKilled) "
            "\t(2) raylet has lagging heartbeats due to slow network or busy workload.",
        )
    elif kind == "ray_fail":
        h0 = d["accused"][0]
        lg.raw(
            t,
            f"ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. "
            f"class_name: RayTrainWorker actor_id: {lg.rng.getrandbits(96):024x} pid: {lg.pids[h0]} "
            f"namespace: {fl.namespace} ip: {fl.hosts[h0].ip} The actor is dead because its node has died. "
            f"Node Id: {lg.rng.getrandbits(112):028x}",
        )
        lg.raw(
            t + 1,
            f"{lg.clock.pylog(t + 1)}\tERROR tune_controller.py:1331 -- Training errored: worker group lost "
            f"{len(d['accused'])} node(s); not retrying (max_failures=0)",
        )
    elif kind == "cuda_error":
        pre = f"{h}: " if fl.log == "torchrun" else ""
        what = "uncorrectable ECC error encountered" if d["xid"] != 79 else "unspecified launch failure"
        lg.raw(t, f"{pre}[rank{h * len(fl.owned) + d['gpu']}]: RuntimeError: CUDA error: {what}")
        lg.raw(
            t + 0.01,
            f"{pre}CUDA kernel errors might be asynchronously reported at some other API call, so the "
            "stacktrace below might be incorrect.",
        )
        _agent_fail(lg, t + 3, h, 1, "")
    elif kind == "nan_stop":
        lg.app(t, "Loss is NaN; stopping training (3 consecutive non-finite losses)", "ERROR")
        lg.raw(t + 0.1, "ValueError: non-finite loss encountered")


def _node_fail(lg: Log, t: float, h: int) -> None:
    fl = lg.fl
    host = fl.hosts[h]
    if fl.log == "torchrun":
        lg.raw(t, f"srun: error: Node failure on {host.name}")
    elif fl.log == "raytrain":
        lg.raw(
            t,
            f"{lg.clock.pylog(t)}\tWARNING worker.py:2452 -- The node with node id: {lg.rng.getrandbits(112):028x} "
            f"and address: {host.ip} and node name: {host.name} has been marked dead because the detector has "
            "missed too many heartbeats from it.",
        )
    else:
        lg.tail.append(f"$ kubectl get events -n {fl.namespace} --field-selector involvedObject.kind=Node")
        lg.tail.append(
            f"Warning   NodeNotReady   node/{host.name}   Node {host.name} status is now: NodeNotReady"
        )


def _oom(lg: Log, t: float, h: int) -> None:
    fl = lg.fl
    host = fl.hosts[h]
    rss = int(mem_total(fl) / 1024 * lg.rng.uniform(0.78, 0.9))  # kB
    lg.st.extra.setdefault("dmesg", {}).setdefault(h, []).append(
        f"{lg.clock.dmesg(t)} Out of memory: Killed process {lg.pids[h] + 1} (python3) total-vm:{rss + 9_000_000}kB, "
        f"anon-rss:{rss}kB, file-rss:812344kB, shmem-rss:0kB, UID:1000 pgtables:3712440kB oom_score_adj:0"
    )
    if fl.log == "torchrun":
        lg.raw(
            t + 2,
            "slurmstepd: error: Detected 1 oom_kill event in StepId=0.0. Some of the step tasks have been OOM Killed.",
        )
        lg.raw(t + 2.1, f"srun: error: {host.name}: task {h}: Out Of Memory")
        _agent_fail(lg, t + 1, h, -9, "Signal 9 (SIGKILL) received by PID")
    elif fl.log == "raytrain":
        lg.raw(
            t + 1,
            f"ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. Worker exit "
            f"type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End "
            f"of file. There are some potential root causes. (1) The process is killed by SIGKILL by OOM killer "
            f"due to high memory usage. ip: {host.ip}",
        )
    else:
        pod = f"{fl.job_name}-master-0" if h == 0 else f"{fl.job_name}-worker-{h - 1}"
        lg.tail.append(f"$ kubectl -n {fl.namespace} describe pod {pod} | grep -A4 'Last State'")
        lg.tail += [
            "    Last State:     Terminated",
            "      Reason:       OOMKilled",
            "      Exit Code:    137",
            f"      Finished:     {lg.clock.local(t):%a, %d %b %Y %H:%M:%S %z}",
        ]


def ending(lg: Log) -> None:
    st, fl = lg.st, lg.fl
    t = st.tl.t_stop
    if st.end == "completed":
        lg.app(
            t - 1,
            f"Training complete: {int(st.tl.step_no[-1]) + 1 if len(st.tl.step_no) else 0} steps; saving final state",
        )
        if fl.log == "torchrun":
            lg.raw(
                t,
                f"0: I{lg.clock.local(t):%m%d %H:%M:%S}.000000 {lg.pids[0]} torch/distributed/elastic/agent/server/"
                "api.py:879] [default] worker group successfully finished. Waiting 300 seconds for other agents to finish.",
            )
        elif fl.log == "raytrain":
            lg.raw(
                t,
                f"{lg.clock.pylog(t)}\tINFO tune.py:1009 -- Total run time: {t - st.tl.t_launch:.2f} seconds",
            )
    for h, lines in sorted(st.extra.get("dmesg", {}).items()):
        if fl.layout == "k8s":
            lg.tail.append(
                f"$ kubectl debug node/{fl.hosts[h].name} -q --image=busybox -- dmesg -T | grep -E 'NVRM|Out of memory'"
            )
        else:
            lg.tail.append(f"==== epilog: dmesg -T on {fl.hosts[h].name} (NVRM / oom) ====")
        lg.tail.extend(lines)


def render(st, rng) -> str:
    """The whole job log of a story."""
    lg = Log(st, rng)
    header(lg)
    steps(lg)
    for t, h, kind, d in sorted(st.events, key=lambda e: e[0]):
        _event(lg, t, h, kind, d)
    ending(lg)
    return lg.text()
