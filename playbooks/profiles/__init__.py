"""Metric profiles: what a semantic signal ("GPU power", "RDMA retransmits") is called by one exporter family.

Profiles are declarations (`builtin/*.toml`, plus a team's own files in the folders listed in the
environment variable `STEPWISE_PROFILE_DIRS`, separated by `os.pathsep`), checked when loaded (see
`_declared`). Built in:

- `amd`: the seed system (hw_* GPU/host plugins, Ray, TensorBoard bridge tb_*);
- `nvidia`: dcgm-exporter (2.4 -> 4.x, HEAD) + node_exporter (1.5 -> 1.12) + training_* gauges;
- `amd-dme`: AMD's device-metrics-exporter + node_exporter + training_* gauges;
- `nvidia-smi`: utkuozdemir/nvidia_gpu_exporter (`nvidia_smi_*`, GPUs by `uuid`, their index joined from
  `nvidia_smi_index`) + node_exporter + training_* gauges;
- `node`: node_exporter (+ training_* gauges) alone: no GPU signal, each listed as unavailable.

Usage::

    profile = resolve_profile(client, names)        # detected, then fitted to this TSDB's labels and jobs
    profile = detect_profile(metric_names)          # detected, declared defaults (no TSDB questions)
    PROFILES["nvidia@dcgm.host=hostname"]           # any resolved name rebuilds the same Profile
    profile.expr("rdma_retransmits", window="2m")   # sum by (host) (rate(...[2m])) with `host` normalised
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from playbooks.gpus import GPU_MODELS

from ._declared import ProfileSpec, load_specs, parse_spec
from ._resolve import build, decode_name, read_facts
from ._signal import DOMAINS, EVENT_SIGNALS, SIGNALS, Profile, ProfileError, Signal, signal_info

if TYPE_CHECKING:  # the client imports the profiles: only its type is needed here
    from playbooks.prometheus import PrometheusClient

__all__ = [
    "BUILTIN_DIR",
    "DOMAINS",
    "EVENT_SIGNALS",
    "PROFILES",
    "SIGNALS",
    "Profile",
    "ProfileError",
    "Signal",
    "detect_profile",
    "load_profile_specs",
    "parse_spec",
    "resolve_profile",
    "signal_info",
    "vendor_mismatch",
]

BUILTIN_DIR = Path(__file__).with_name("builtin")
ENV_DIRS = "STEPWISE_PROFILE_DIRS"


def _dirs() -> tuple[Path, ...]:
    extra = [Path(p) for p in os.environ.get(ENV_DIRS, "").split(os.pathsep) if p.strip()]
    return (BUILTIN_DIR, *extra)


@functools.lru_cache(maxsize=8)
def _specs_for(dirs: tuple[Path, ...]) -> dict[str, ProfileSpec]:
    return load_specs(list(dirs))


def load_profile_specs() -> dict[str, ProfileSpec]:
    """Return {name: ProfileSpec} of the built-in and configured folders (cached per folder list)."""
    return _specs_for(_dirs())


@functools.lru_cache(maxsize=256)
def _built(dirs: tuple[Path, ...], name: str) -> Profile:
    base, choices = decode_name(name)
    specs = _specs_for(dirs)
    if base not in specs:
        raise KeyError(name)
    return build(specs[base], choices)


class _Registry(Mapping[str, Profile]):
    """Declared profiles by name; a resolved name ("nvidia@...") is rebuilt on lookup, never listed."""

    def __getitem__(self, name: str) -> Profile:
        if not isinstance(name, str) or not name:
            raise KeyError(name)
        return _built(_dirs(), name)

    def __contains__(self, name: object) -> bool:
        try:
            self[name]  # type: ignore[index]
        except (KeyError, ProfileError, ValueError):
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(load_profile_specs())

    def __len__(self) -> int:
        return len(load_profile_specs())


PROFILES: Mapping[str, Profile] = _Registry()


def _rank(spec: ProfileSpec, present: set[str]) -> tuple[int, float]:
    """(metrics of the family present, share of its metrics present); (0, 0) without an anchor."""
    prefixes = {p for e in spec.exporters.values() for p in e.prefixes}
    if not any(p + a in present for a in spec.anchors for p in prefixes):
        return (0, 0.0)
    hit = len(spec.needed & present)
    return (hit, hit / max(1, len(spec.needed)))


def _choose(names: set[str], prefer: str | None) -> ProfileSpec:
    specs = load_profile_specs()
    if prefer and prefer != "auto":
        base = prefer.partition("@")[0]
        if base not in specs:
            raise ProfileError(f"unknown profile {prefer!r}; known: {', '.join(specs)}")
        if _rank(specs[base], names)[0] == 0:
            found = [s.name for s in specs.values() if _rank(s, names)[0] > 0]
            raise ProfileError(
                f"this TSDB holds none of the {base} profile's metrics ({', '.join(specs[base].anchors[:3])}…)"
                + (f"; it holds the {', '.join(found)} profile's: use auto" if found else "")
            )
        return specs[base]
    ranked = sorted(
        specs.values(), key=lambda s: (_rank(s, names), s.name in ("amd", "nvidia")), reverse=True
    )
    if not ranked or _rank(ranked[0], names)[0] == 0:
        sample = ", ".join(sorted(names)[:8]) or "no metrics at all"
        raise ProfileError(
            f"no known metric profile matches this TSDB (it holds {sample}…); "
            f"known: {', '.join(s.title for s in specs.values())}"
        )
    return ranked[0]


def detect_profile(metric_names: Iterable[str], *, prefer: str | None = None) -> Profile:
    """Return the profile that best matches the TSDB's metric names (declared defaults), or `prefer`.

    The best match holds the most of its family's metrics, then the largest share of them (a
    node_exporter-only TSDB matches `node`, not a GPU profile whose GPU half is missing). An explicit
    profile wins over detection, but not over the data: one none of whose anchors the TSDB holds would
    read nothing and call any job healthy. Raises ProfileError when `prefer` is unknown or absent from
    the TSDB, or no profile's anchor is present.
    """
    names = set(metric_names)
    if prefer and "@" in prefer:
        _choose(names, prefer)
        return PROFILES[prefer]
    return PROFILES[_choose(names, prefer).name]


def resolve_profile(
    client: PrometheusClient, metric_names: Iterable[str], *, prefer: str | None = None
) -> Profile:
    """Return `detect_profile`'s choice fitted to this TSDB (host labels, job names, prefix, metric picks).

    Asks the server a few label questions (`client`: a `PrometheusClient`); raises ProfileError as
    `detect_profile` does, PrometheusError when the server fails.
    """
    names = set(metric_names)
    if prefer and "@" in prefer:
        return detect_profile(names, prefer=prefer)
    spec = _choose(names, prefer)
    return PROFILES[build(spec, read_facts(client, spec, names)).name]


def vendor_mismatch(gpu_model: str, profile: str) -> str:
    """Return why a GPU model does not fit a profile's exporters (an H100 on the AMD seed system), or ""."""
    model = GPU_MODELS.get(gpu_model)
    try:
        prof = PROFILES[profile] if profile else None
    except (KeyError, ProfileError):
        prof = None
    if model is None or prof is None or not prof.vendor or model.vendor == prof.vendor:
        return ""
    return (
        f"{model.name} is an {model.vendor.upper()} GPU but this job's exporters are {prof.vendor.upper()}'s "
        f"({prof.base or prof.name} profile): its power and thermal priors may not fit"
    )
