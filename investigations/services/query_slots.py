"""At most STEPWISE_QUERY_CONCURRENCY queries in flight against one data source, across the playbooks
of a diagnosis running on every worker of a host."""

from __future__ import annotations

import fcntl
import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings

from investigations.models import DataSource
from playbooks.prometheus import PrometheusClient


class QuerySlots:
    """At most `size` queries in flight against one data source, across threads and worker processes.

    Playbooks of a run execute in parallel on as many workers as exist, so a per-task thread pool does
    not bound the load on the job's Prometheus. Each query holds one of `size` slot files, locked with
    flock(2) (a lock belongs to its open file, so threads contend as processes do); the slot files live
    in STEPWISE_DATA_DIR, shared by the workers of one host.
    """

    def __init__(self, key: str, size: int, root: Path, *, poll_s: float = 0.02) -> None:
        self.paths = [root / f"{key}.{i}.lock" for i in range(max(1, size))]
        self.poll_s = poll_s
        root.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def hold(self) -> Iterator[int]:
        """Hold a free slot for the duration of the block; yield its index."""
        start = random.randrange(len(self.paths))  # spread the first tries over the slots
        while True:
            for i in range(len(self.paths)):
                index = (start + i) % len(self.paths)
                fd = os.open(self.paths[index], os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                try:
                    yield index
                finally:
                    os.close(fd)  # closing the file releases its lock
                return
            time.sleep(self.poll_s)


class BoundedClient:
    """A PrometheusClient whose queries each hold one of the data source's query slots."""

    def __init__(self, client: PrometheusClient, slots: QuerySlots) -> None:
        self._client = client
        self._slots = slots

    def query(self, *args: Any, **kwargs: Any) -> Any:
        with self._slots.hold():
            return self._client.query(*args, **kwargs)

    def query_range(self, *args: Any, **kwargs: Any) -> Any:
        with self._slots.hold():
            return self._client.query_range(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def datasource_slots(datasource: DataSource) -> QuerySlots:
    """Return the query slots of a data source: STEPWISE_QUERY_CONCURRENCY of them."""
    return QuerySlots(
        f"datasource-{datasource.pk}",
        settings.STEPWISE_QUERY_CONCURRENCY,
        Path(settings.STEPWISE_DATA_DIR) / "query-slots",
    )
