"""Shared fixtures: generated incident jobs (built once per session) and read-only Prometheus servers."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from playbooks.synth import generate_job

# Small but real: 4 hosts x 4 GPUs, ~1.3 h at 15 s, the last 20 minutes only in wal/.
SMALL = {"nodes": 4, "gpus": 4, "interval": 15.0, "hours": 1.3, "wal_tail_minutes": 20}


#: Tests open many jobs within a minute, each served by its own TSDB copy: a cap of 4 copies used in the
#: last 60 s (the production default) would answer "busy" to whichever test comes fifth. The cap itself is
#: tested where a test sets it (tests/faults/test_served_copies.py, tests/browser/test_walk_pages.py).
TEST_MAX_COPIES = 12


@pytest.fixture(autouse=True)
def _served_copies_cap(settings) -> None:
    settings.STEPWISE_TSDB_MAX_COPIES = TEST_MAX_COPIES


@pytest.fixture(scope="session", autouse=True)
def _servers_die_with_pytest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every Prometheus serving a copy under this session's temporary folder stops when pytest ends, also
    when it is killed and no teardown runs (a harness's timeout): the folder is guarded (playbooks.tsdb_guard)."""
    from playbooks import tsdb_guard

    base = tmp_path_factory.getbasetemp()
    tsdb_guard.guard(base)
    yield
    tsdb_guard.release(base)


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jobs")


@pytest.fixture(scope="session")
def job_factory(synth_root: Path):
    """Return build(scenario, seed=1, profile="amd", **kw) -> (job_dir, truth); each build happens once."""
    cache: dict[tuple, tuple[Path, dict]] = {}

    def build(scenario: str, seed: int = 1, profile: str = "amd", **kw) -> tuple[Path, dict]:
        opts = SMALL | kw
        key = (scenario, seed, profile, tuple(sorted(opts.items())))
        if key not in cache:
            name = f"{scenario}-{profile}-{seed}-{len(cache)}"
            built = generate_job(
                scenario, seed, opts.pop("nodes"), synth_root / name, profile=profile, **opts
            )
            cache[key] = (built.job_dirs[0], built.truth)
        return cache[key]

    return build


@pytest.fixture(scope="session")
def view_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A work root for read-only Prometheus copies; every server left in it is stopped at the end."""
    from playbooks import tsdb_server

    root = tmp_path_factory.mktemp("views")
    yield root
    tsdb_server.reap_leftovers(root)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def served_job(job_factory, view_root: Path):
    """Return serve(scenario, seed=1, profile="amd", **kw) -> (PrometheusClient, truth, job_dir)."""
    from playbooks import tsdb_server
    from playbooks.prometheus import PrometheusClient

    clients: dict[Path, PrometheusClient] = {}

    def serve_dir(job_dir: Path) -> PrometheusClient:
        if job_dir not in clients:
            served = tsdb_server.ensure_served(job_dir / "prometheus", work_root=view_root)
            clients[job_dir] = PrometheusClient(served.url, timeout=30.0, retries=2, backoff=0.05)
        return clients[job_dir]

    def serve(scenario: str, seed: int = 1, profile: str = "amd", **kw):
        job_dir, truth = job_factory(scenario, seed, profile, **kw)
        return serve_dir(job_dir), truth, job_dir

    serve.dir = serve_dir  # type: ignore[attr-defined]
    yield serve
    for c in clients.values():
        c.close()


def load_truth(job_dir: Path) -> dict:
    return json.loads((job_dir / "truth.json").read_text())
