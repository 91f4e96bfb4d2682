"""Every exception `playbooks/` defines derives from the one root, `PlaybooksError`."""

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import playbooks
from playbooks.errors import PlaybooksError


def _playbooks_exceptions() -> dict[str, type[BaseException]]:
    found = {}
    for info in pkgutil.walk_packages(playbooks.__path__, "playbooks."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                found[f"{info.name}.{name}"] = obj
    return found


def test_every_playbooks_exception_derives_from_the_root():
    found = _playbooks_exceptions()
    # the walk reaches the exceptions wherever their module moved them (private modules included)
    from playbooks.prometheus import PrometheusError
    from playbooks.triage import TriageError
    from playbooks.tunnel import TunnelError

    assert {PrometheusError, TriageError, TunnelError} <= set(found.values())
    outside = sorted(
        name
        for name, cls in found.items()
        if cls is not PlaybooksError and not issubclass(cls, PlaybooksError)
    )
    assert outside == []


def test_the_root_keeps_the_builtin_bases_callers_catch():
    from playbooks.confine import OutsideRoots
    from playbooks.jobdirs import JobIdError

    assert issubclass(OutsideRoots, PermissionError) and issubclass(OutsideRoots, PlaybooksError)
    assert issubclass(JobIdError, ValueError) and issubclass(JobIdError, PlaybooksError)


def test_no_exception_name_exists_in_both_layers():
    """The web layer's exceptions are named apart from the domain's (a reader of `except TimelineError`
    knows which one it is)."""
    root = Path(playbooks.__file__).parent.parent
    web_classes = set()
    for package in ("investigations", "reports", "stepwise"):
        for path in (root / package).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            web_classes |= {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    domain = {name.rsplit(".", 1)[1] for name in _playbooks_exceptions()}
    assert web_classes  # the walk found the app's classes
    assert sorted(domain & web_classes) == []
