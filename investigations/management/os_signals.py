"""SIGTERM and Ctrl-C for the commands that start Prometheus servers (`diagnose`, `compare`).

While a command works, SIGTERM and SIGINT become `SystemExit(128 + n)` so that its `finally` blocks stop
every server it started. Two things make a bare "raise in the handler" unreliable:

- Python runs a signal handler between any two bytecodes of the main thread, also inside a `__del__`, a
  weakref callback or a generator's close, where an exception is printed as "Exception ignored" and
  dropped: the command would then finish normally and exit 0 although it was told to stop.
- A signal that arrives while the servers are being stopped must not cut that cleanup short.

So the signal is also remembered: `shielded()` turns raising off for the cleanup, and `exit_if_signalled()`
ends the command with 128 + n afterwards, whatever became of the raise. The dropped raise itself is no
error of the command's: while ExitOnSignal is active, `sys.unraisablehook` swallows exactly that
`SignalExit` (Python would print "Exception ignored in: ..." and a traceback) and passes on anything else.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


# What signal.signal() takes and returns (typeshed spells it signal._HANDLER, a private name).
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class SignalExit(SystemExit):
    """The SystemExit(128 + n) that ExitOnSignal's handler raises for signal n."""


class ExitOnSignal:
    """Context manager: SIGTERM/SIGINT raise SignalExit(128 + n) inside it and are remembered."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.received: int | None = None
        self._raising = False
        self._previous: dict[int, _Handler] = {}
        self._previous_hook: Callable[[sys.UnraisableHookArgs], Any] | None = None

    def _handler(self, signum: int, frame) -> None:
        if self.received is None:
            self.received = signum
        if self._raising:
            raise SignalExit(128 + signum)

    def _unraisable(self, unraisable: sys.UnraisableHookArgs) -> None:
        """Drop our own raise that landed where Python cannot raise (a __del__, a weakref callback): the
        signal is remembered and the command still exits 128 + n. Anything else goes to the previous hook."""
        if isinstance(unraisable.exc_value, SignalExit) and self.received is not None:
            return
        (self._previous_hook or sys.__unraisablehook__)(unraisable)

    def __enter__(self) -> ExitOnSignal:
        self._previous_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        self._previous = {s: signal.signal(s, self._handler) for s in _SIGNALS}
        self._raising = True
        return self

    def __exit__(self, *exc) -> None:
        # signal.signal() runs the handlers of signals already pending before it swaps them, so nothing
        # that arrived while we were installed is dropped here.
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous = {}
        if sys.unraisablehook == self._unraisable:
            sys.unraisablehook = self._previous_hook or sys.__unraisablehook__
        self._previous_hook = None

    @contextmanager
    def shielded(self) -> Iterator[None]:
        """Run cleanup that must finish: signals arriving inside are remembered, not raised."""
        raising, self._raising = self._raising, False
        try:
            yield
        finally:
            self._raising = raising

    def exit_if_signalled(self) -> None:
        """Exit 128 + n, with one line on stderr, if a signal arrived (even if its raise was swallowed)."""
        if self.received is not None:
            sys.stderr.write(f"{self.command}: interrupted by {signal.Signals(self.received).name}\n")
            sys.exit(128 + self.received)


class CommandExit(Exception):
    """End the command with `code` and one line on stderr (the contract's 2: bad input, 3: unreachable)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


def run_command[T](command: str, work: Callable[[ExitOnSignal], T]) -> T:
    """Return work(signals) run under ExitOnSignal; CommandExit and signals end the process as the contract says.

    stdout stays empty unless `work` returns: a CommandExit writes its reason to stderr and exits with its
    code, and a signal (raised, or swallowed and only recorded) exits 128 + n after `work`'s cleanup.
    """
    with ExitOnSignal(command) as signals:
        try:
            result = work(signals)
        except CommandExit as exc:
            sys.stderr.write(f"{command}: {exc}\n")
            sys.exit(exc.code)
        except SystemExit:
            signals.exit_if_signalled()  # the servers are already stopped (work's finally blocks)
            raise
        signals.exit_if_signalled()  # a signal whose raise was swallowed: still no result on stdout
    return result
