"""Job directories are read only inside STEPWISE_JOB_ROOTS, and jobs are keyed by JOB_ID, not path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from investigations import services
from investigations.models import DataSource, Job

pytestmark = pytest.mark.django_db


def _job_dir(parent: Path, name: str) -> Path:
    job_dir = parent / name
    (job_dir / "prometheus").mkdir(parents=True)
    (parent / f"{name}.log").write_text("JOB_ID=81234\n")
    (job_dir / "log").symlink_to(f"../{name}.log")
    return job_dir


def test_it_accepts_a_job_dir_inside_a_root(job_root: Path) -> None:
    job_dir = _job_dir(job_root, "81234-JAX-llama2-70b")
    assert services.job_dir_validate(str(job_dir)) == job_dir.resolve()


def test_it_refuses_a_dir_outside_the_roots(job_root: Path, tmp_path: Path) -> None:
    outside = _job_dir(tmp_path / "elsewhere", "81234-JAX-llama2-70b")
    with pytest.raises(services.DataSourceError, match="is outside the allowed job roots") as exc:
        services.job_dir_validate(outside)
    assert str(job_root) in str(exc.value)
    assert "STEPWISE_JOB_ROOTS" in str(exc.value)


def test_it_refuses_dot_dot_escapes(job_root: Path, tmp_path: Path) -> None:
    _job_dir(tmp_path / "elsewhere", "81234-JAX-x")
    with pytest.raises(services.DataSourceError, match="outside the allowed job roots"):
        services.job_dir_validate(f"{job_root}/../elsewhere/81234-JAX-x")


def test_it_refuses_a_symlink_that_leads_out(job_root: Path, tmp_path: Path) -> None:
    target = _job_dir(tmp_path / "elsewhere", "81234-JAX-x")
    (job_root / "81234-JAX-x").symlink_to(target)
    with pytest.raises(services.DataSourceError, match="outside the allowed job roots"):
        services.job_dir_validate(job_root / "81234-JAX-x")


def test_it_refuses_a_prometheus_folder_that_leads_out(job_root: Path, tmp_path: Path) -> None:
    """The TSDB is resolved too: a job dir inside a root cannot point its prometheus/ elsewhere."""
    (tmp_path / "secret-tsdb").mkdir()
    job_dir = job_root / "81234-JAX-x"
    job_dir.mkdir()
    (job_dir / "prometheus").symlink_to(tmp_path / "secret-tsdb")
    _, source = services.job_register(job_dir)
    with pytest.raises(services.DataSourceError, match="outside the allowed job roots"):
        services.datasource_client(source)


def test_it_refuses_relative_paths_the_root_itself_and_missing_dirs(job_root: Path) -> None:
    for path in ("jobs/81234-JAX-x", job_root, job_root / "missing"):
        with pytest.raises(services.DataSourceError):
            services.job_dir_validate(path)


def test_it_registers_a_job_by_its_id_and_follows_a_rename(job_root: Path) -> None:
    """A TGS-tagged rename after the job ends updates the same Job and DataSource."""
    job_dir = _job_dir(job_root, "81234-JAX-llama2-70b")
    job, source = services.job_register(job_dir, cluster="mi300")
    assert (job.cluster, job.job_id, job.name) == ("mi300", "81234", "JAX-llama2-70b")
    assert job.log_path == str(job_root.resolve() / "81234-JAX-llama2-70b.log")
    assert (source.kind, source.address) == (DataSource.Kind.JOB_TSDB, str(job_dir.resolve()))

    renamed = job_dir.rename(job_root / "81234-JAX-llama2-70b-8N-TGS_1234.500")
    again, source_again = services.job_register(renamed, cluster="mi300")
    assert (again.pk, source_again.pk) == (job.pk, source.pk)
    assert Job.objects.count() == 1
    assert source_again.address == str(renamed.resolve())


@pytest.mark.parametrize(
    ("name", "job_id", "job_name"),
    [
        ("k8s-20250101-120000-ab12-JAX-x", "k8s-20250101-120000-ab12", "JAX-x"),
        ("local_20250101_120000_ab12-JAX-y", "local_20250101_120000_ab12", "JAX-y"),
    ],
)
def test_it_reads_k8s_and_local_job_ids(job_root: Path, name: str, job_id: str, job_name: str) -> None:
    job, _ = services.job_register(_job_dir(job_root, name))
    assert (job.job_id, job.name) == (job_id, job_name)


def test_it_falls_back_to_the_generators_truth_file(job_root: Path) -> None:
    job_dir = _job_dir(job_root, "healthy")
    (job_dir / "truth.json").write_text(json.dumps({"job_id": "33129", "job_name": "JAX-llama2-70b"}))
    job, _ = services.job_register(job_dir)
    assert (job.job_id, job.name) == ("33129", "JAX-llama2-70b")
