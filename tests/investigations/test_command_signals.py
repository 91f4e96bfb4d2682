"""ExitOnSignal: how `diagnose` and `compare` turn SIGTERM/Ctrl-C into an exit that stops their servers."""

from __future__ import annotations

import os
import signal
import sys
import time
import weakref

import pytest

from investigations.management.os_signals import ExitOnSignal


class _KillsInDel:
    """An object whose finalizer receives a signal: Python drops an exception raised inside __del__."""

    def __init__(self, sig: int) -> None:
        self.sig = sig

    def __del__(self) -> None:
        os.kill(os.getpid(), self.sig)
        for _ in range(1000):  # bytecodes after the signal, where its handler runs
            pass


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_signal_raises_systemexit_128_plus_n(sig):
    """Inside the block a signal becomes SystemExit(128 + n), so `finally` blocks run."""
    with pytest.raises(SystemExit) as exc, ExitOnSignal("test"):
        os.kill(os.getpid(), sig)
        for _ in range(1000):
            pass
    assert exc.value.code == 128 + sig


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_swallowed_raise_still_ends_with_128_plus_n(capsys):
    """A signal handled inside __del__ (its raise is dropped): exit_if_signalled() still exits 143."""
    with ExitOnSignal("test") as signals:
        _KillsInDel(signal.SIGTERM)  # dropped at once: its __del__ gets the signal
        assert signals.received == signal.SIGTERM
        with pytest.raises(SystemExit) as exc:
            signals.exit_if_signalled()
    assert exc.value.code == 128 + signal.SIGTERM
    assert "interrupted by SIGTERM" in capsys.readouterr().err


def test_cleanup_under_shield_is_not_cut_short():
    """A signal during shielded cleanup is remembered; the cleanup runs to its end."""
    done = []
    with ExitOnSignal("test") as signals:
        with signals.shielded():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
            done.append("cleanup finished")
        assert done == ["cleanup finished"]
        with pytest.raises(SystemExit) as exc:
            signals.exit_if_signalled()
    assert exc.value.code == 143


def test_no_signal_no_exit_and_handlers_restored():
    """Without a signal exit_if_signalled() returns; leaving the block restores the previous handlers."""
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with ExitOnSignal("test") as signals:
        assert signal.getsignal(signal.SIGTERM) != before[0]
        signals.exit_if_signalled()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def _dropped_in_a_weakref_callback(sig: int | None, error: BaseException | None = None) -> None:
    """Drop an object whose weakref callback gets `sig` (sent to this process) while it sleeps, or raises
    `error`: Python cannot raise from a callback and hands the exception to sys.unraisablehook."""

    class Thing:
        pass

    def callback(_ref) -> None:
        if sig is not None:
            os.kill(os.getpid(), sig)
            time.sleep(0.5)  # the handler runs inside the sleep and raises there
        if error is not None:
            raise error

    thing = Thing()
    ref = weakref.ref(thing, callback)
    del thing
    assert ref() is None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_signal_in_a_weakref_callback_leaves_stderr_clean(sig, monkeypatch, capfd):
    """The raise dropped inside a weakref callback is not reported ("Exception ignored in: ..." and a
    traceback on stderr); the command still exits 128 + n with its one line."""
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)  # Python's own: prints to stderr
    with ExitOnSignal("test") as signals:
        _dropped_in_a_weakref_callback(sig)
        assert signals.received == sig
        assert capfd.readouterr().err == ""
        with pytest.raises(SystemExit) as exc:
            signals.exit_if_signalled()
    assert exc.value.code == 128 + sig
    assert capfd.readouterr().err == f"test: interrupted by {signal.Signals(sig).name}\n"


def test_other_unraisable_exceptions_still_reach_the_previous_hook(monkeypatch):
    """Only the handler's own SystemExit is swallowed: any other error of a callback, even a SystemExit(143)
    raised by the code itself before any signal, goes to the hook that was there; which is back afterwards."""
    seen: list[BaseException | None] = []

    def previous(unraisable) -> None:
        seen.append(unraisable.exc_value)

    monkeypatch.setattr(sys, "unraisablehook", previous)
    with ExitOnSignal("test"):
        _dropped_in_a_weakref_callback(None, ValueError("a real bug"))
        _dropped_in_a_weakref_callback(None, SystemExit(143))
    assert [type(e).__name__ for e in seen] == ["ValueError", "SystemExit"]
    assert sys.unraisablehook is previous
