"""Pinned charts as static images for the exports: the frozen Plotly figure rendered to PNG by kaleido
(Plotly's own static export) driving Debian's Chromium (`STEPWISE_CHROMIUM`, default /usr/bin/chromium).

One Chromium serves every chart of an export (kaleido's sync server: about 5 s to start on 2 busy cores,
then well under a second per chart), and each PNG is kept on disk by the figure's hash, so an export of an
unchanged report renders nothing again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

WIDTH, HEIGHT = 900, 320


def _cache_dir() -> Path:
    path = Path(settings.STEPWISE_DATA_DIR) / "report-charts"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _key(figure: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(figure, sort_keys=True, default=str).encode()).hexdigest()[:32]


def charts_png(figures: list[dict[str, Any]]) -> list[bytes | None]:
    """Return each figure as PNG bytes (None when it cannot be drawn: no data, or Chromium failed)."""
    out: list[bytes | None] = [None] * len(figures)
    todo = []
    for i, figure in enumerate(figures):
        if not isinstance(figure, dict) or not figure.get("data"):
            continue
        cached = _cache_dir() / f"{_key(figure)}.png"
        if cached.exists():
            out[i] = cached.read_bytes()
        else:
            todo.append((i, figure, cached))
    if todo:
        for (i, _, cached), png in zip(todo, _render([f for _, f, _ in todo]), strict=True):
            if png is not None:
                tmp = cached.with_suffix(".tmp")
                tmp.write_bytes(png)
                tmp.replace(cached)
            out[i] = png
    return out


def _render(figures: list[dict[str, Any]]) -> list[bytes | None]:
    import kaleido
    import plotly.graph_objects as go
    import plotly.io as pio

    os.environ.setdefault("BROWSER_PATH", settings.STEPWISE_CHROMIUM)
    results: list[bytes | None] = []
    try:
        kaleido.start_sync_server(silence_warnings=True)
    except Exception as exc:  # kaleido raises its own errors and choreographer's when Chromium is missing
        logger.warning("cannot start Chromium for chart images: %s", exc)
        return [None] * len(figures)
    try:
        for figure in figures:
            try:
                fig = go.Figure(figure)
                fig.update_layout(width=WIDTH, height=HEIGHT, template="plotly_white")
                with warnings.catch_warnings():  # plotly warns that kaleido's server ignores its options
                    warnings.simplefilter("ignore", UserWarning)
                    results.append(pio.to_image(fig, format="png", width=WIDTH, height=HEIGHT, scale=2))
            except Exception as exc:  # one bad figure must not lose the others
                logger.warning("cannot draw a pinned chart: %s", exc)
                results.append(None)
    finally:
        kaleido.stop_sync_server(silence_warnings=True)
    return results
