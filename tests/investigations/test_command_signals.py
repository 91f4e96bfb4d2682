"""ExitOnSignal: how `diagnose` and `compare` turn SIGTERM/Ctrl-C into an exit that stops their servers."""

from __future__ import annotations

import os
import signal

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
