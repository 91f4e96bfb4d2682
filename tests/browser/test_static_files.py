"""Static files served from the source tree (the demo): a file edited while the app runs is served whole.

WhiteNoise used to record each file's size when the app started, and an edited file was then served cut off
at its old length (an edited stylesheet or script broke the page until a restart)."""

from __future__ import annotations

import urllib.request
import uuid

from .conftest import REPO


def _get(url: str) -> tuple[bytes, dict[str, str]]:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.read(), dict(resp.headers)


def test_a_static_file_edited_while_the_app_runs_is_served_whole(stepwise_app) -> None:
    name = f"walk-edit-{uuid.uuid4().hex[:8]}.css"
    path = REPO / "static" / name
    try:
        path.write_text("a { color: red; }\n")
        first, headers = _get(stepwise_app.url(f"/static/{name}"))
        assert first == b"a { color: red; }\n"
        assert "max-age=0" in headers["Cache-Control"]  # the browser asks again on the next page
        edited = "a { color: red; }\n" + "".join(f".c{i} {{ margin: {i}px; }}\n" for i in range(200))
        path.write_text(edited)
        again, headers = _get(stepwise_app.url(f"/static/{name}"))
        assert again == edited.encode()
        assert headers["Content-Length"] == str(len(edited))
    finally:
        path.unlink(missing_ok=True)
