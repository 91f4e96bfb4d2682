"""The triage reads which GPUs of each node the job holds from the environment lines its log prints."""

from __future__ import annotations

import pytest

from playbooks.triage import triage_log

HEADER = ["SLURM_JOB_ID=4711", "SLURM_JOB_NODELIST=gpu-[101-103]"]


@pytest.mark.parametrize(
    ("lines", "want"),
    [
        (
            ["CUDA_VISIBLE_DEVICES=0,1,2,3"],
            {"source": "CUDA_VISIBLE_DEVICES", "all": [0, 1, 2, 3], "hosts": {}},
        ),
        (
            ["gpu-101: CUDA_VISIBLE_DEVICES=0,1,2,3", "[gpu-102] export CUDA_VISIBLE_DEVICES=2,4,5,7"],
            {
                "source": "CUDA_VISIBLE_DEVICES",
                "all": None,
                "hosts": {"gpu-101": [0, 1, 2, 3], "gpu-102": [2, 4, 5, 7]},
            },
        ),
        # the scheduler's own indices of the node come before the process's view (a cgroup counts from 0)
        (
            ["CUDA_VISIBLE_DEVICES=0,1,2,3", "SLURM_STEP_GPUS=4-7"],
            {"source": "SLURM_STEP_GPUS", "all": [4, 5, 6, 7], "hosts": {}},
        ),
        # one process a GPU, each printing its own: the node's are their union
        (
            [f"{r}: GPU_DEVICE_ORDINAL={r}" for r in range(4)],
            {"source": "GPU_DEVICE_ORDINAL", "all": [0, 1, 2, 3], "hosts": {}},
        ),
        # a word with a digit that is none of the job's nodes names no host
        (
            ['launcher v1.2 NVIDIA_VISIBLE_DEVICES="1,3"'],
            {"source": "NVIDIA_VISIBLE_DEVICES", "all": [1, 3], "hosts": {}},
        ),
        # UUIDs, all, none cannot be placed on the exporter's gpu label
        (
            ["NVIDIA_VISIBLE_DEVICES=GPU-8f1c2a3b-1111-2222-3333-444455556666", "CUDA_VISIBLE_DEVICES=all"],
            None,
        ),
        (["NCCL_DEBUG=INFO", "rank 0 uses device 3"], None),
    ],
)
def test_it_reads_the_jobs_gpus(lines, want):
    """Each table row: the log's lines and the `details.job_gpus` the triage reports."""
    details = triage_log(HEADER + lines).to_dict()["details"]
    assert details.get("job_gpus") == want
