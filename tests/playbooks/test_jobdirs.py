"""Finding a job's directory under the job roots from its JOB_ID."""

from __future__ import annotations

from pathlib import Path

import pytest

from playbooks.jobdirs import JobIdError, find_job_dirs, looks_like_job_id


def _job(
    root: Path, name: str, *, header: str | None = None, inside: bool = False, tsdb: bool = True
) -> Path:
    d = root / name
    d.mkdir(parents=True)
    if tsdb:
        (d / "prometheus").mkdir()
    if header is not None:
        log = d / "job.log" if inside else root / f"{name}.log"
        log.write_text(f"I1123 04:00:00 launcher.py:12] starting\n{header}\nJOB_NAME=JAX-llama\n")
    return d


def test_a_folder_named_by_the_job_id_prefix_is_found_whatever_the_renamer_appended(tmp_path: Path) -> None:
    a = _job(tmp_path / "r1", "81234-JAX-llama2-70b-steps_200-8N-TGS_1234.567")
    _job(tmp_path / "r1", "812345-JAX-other")  # a longer id sharing the digits is another job
    _job(tmp_path / "r2", "81234")
    assert find_job_dirs([tmp_path / "r1", tmp_path / "r2"], "81234") == [a, tmp_path / "r2" / "81234"]


def test_a_folder_named_otherwise_is_found_by_its_log_header(tmp_path: Path) -> None:
    beside = _job(tmp_path, "thermal-straggler", header="JOB_ID=91257")
    inside = _job(tmp_path, "copied-job", header="SLURM_JOB_ID=k8s-20260301-120000-ab12", inside=True)
    _job(tmp_path, "unrelated", header="JOB_ID=91258")
    assert find_job_dirs([tmp_path], "91257") == [beside]
    assert find_job_dirs([tmp_path], "k8s-20260301-120000-ab12") == [inside]


def test_folders_without_a_tsdb_missing_roots_and_unknown_ids_give_nothing(tmp_path: Path) -> None:
    _job(tmp_path, "81234-JAX-llama", tsdb=False)
    assert find_job_dirs([tmp_path, tmp_path / "missing"], "81234") == []
    assert find_job_dirs([tmp_path], "99999") == []


def test_the_header_budget_bounds_the_files_read(tmp_path: Path) -> None:
    for i in range(5):
        _job(tmp_path, f"job-{i}", header=f"JOB_ID={1000 + i}")
    assert find_job_dirs([tmp_path], "1004", max_logs=5) == [tmp_path / "job-4"]
    assert find_job_dirs([tmp_path], "1004", max_logs=2) == []  # job-4's log is past the budget


@pytest.mark.parametrize("text", ["", "../etc", "/jobs/81234", "81234 rm", "-rf", "x" * 101])
def test_text_that_cannot_be_a_job_id_is_refused(tmp_path: Path, text: str) -> None:
    assert not looks_like_job_id(text)
    with pytest.raises(JobIdError, match="is not a job id"):
        find_job_dirs([tmp_path], text)


@pytest.mark.parametrize("text", ["81234", "k8s-20260301-120000-ab12", "local_20260301_120000_ab12"])
def test_the_seed_systems_job_id_forms_are_job_ids(text: str) -> None:
    assert looks_like_job_id(text)


def test_a_log_symlink_out_of_the_root_is_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside.log"
    outside.write_text("JOB_ID=777\n")
    root = tmp_path / "root"
    d = _job(root, "copied-job")
    (d / "log").symlink_to(outside)
    assert find_job_dirs([root], "777") == []
    inside = root / "copied-job.real.log"
    inside.write_text("JOB_ID=777\n")
    (d / "log").unlink()
    (d / "log").symlink_to(inside)  # the seed system's own `log` symlink, inside the root: read
    assert find_job_dirs([root], "777") == [d]
