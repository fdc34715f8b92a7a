"""SIGTERM during a traced run: a clean stop, like Ctrl-C.

The handler raises `Terminated` in the main thread, which unwinds the traced
program; the trace gets an end record (outcome ``signal``), the report is
written, and the run exits 128 + 15. It is installed only where SIGTERM has its
default action (a program started with SIGTERM ignored keeps ignoring it), and
the previous handler is put back when the run ends. A SIGTERM that comes after
the program ended is remembered: the trace and report are finished first.
"""

from __future__ import annotations

import signal
import threading
import traceback
from typing import Any, Callable


class Terminated(BaseException):
    """Raised in the main thread by prov-trace's SIGTERM handler: unwinds the traced program like Ctrl-C does.

    A BaseException, so the program's ``except Exception`` does not swallow it.
    """

    def __init__(self, signum: int):
        self.signum = signum
        try:
            self.name = signal.Signals(signum).name
        except ValueError:
            self.name = f"signal {signum}"
        super().__init__(self.name)

    @property
    def exit_code(self) -> int:
        """What a shell reports for a process the signal ended: 128 + the signal number."""
        return 128 + self.signum


class SigtermStop:
    """Turns SIGTERM into `Terminated` while `running()` is true; remembers a later one in `late`."""

    def __init__(self, running: Callable[[], bool]):
        self._running = running
        self._previous: Any = None
        self.late: int | None = None

    def install(self) -> None:
        try:
            previous = signal.getsignal(signal.SIGTERM)
            if previous != signal.SIG_DFL:
                return
            signal.signal(signal.SIGTERM, self._handle)
            self._previous = previous
        except (ValueError, OSError, AttributeError):  # not the main thread, or no SIGTERM on this platform
            self._previous = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self._running():
            raise Terminated(signum)
        if self.late is None:
            self.late = signum

    def restore(self) -> None:
        if self._previous is not None:
            try:
                signal.signal(signal.SIGTERM, self._previous)
            except (ValueError, OSError):
                pass
            self._previous = None


class SigtermUnwinds:
    """While the body runs, a SIGTERM that would kill the process at once (its default action) raises
    `Terminated` instead, so the body's ``except``/``finally`` can clean up (a half-written temporary file);
    afterwards the signal is raised again with its default action, and the process ends as SIGTERM ends it.

    Does nothing outside the main thread, or where SIGTERM has a handler (or is ignored) already.
    """

    def __init__(self) -> None:
        self._previous: Any = None

    def __enter__(self) -> "SigtermUnwinds":
        try:
            if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                self._previous = signal.signal(signal.SIGTERM, self._handle)
        except (ValueError, OSError, AttributeError):
            self._previous = None
        return self

    @staticmethod
    def _handle(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._previous is None:
            return
        signal.signal(signal.SIGTERM, self._previous)
        self._previous = None
        if exc_type is not None and issubclass(exc_type, Terminated):
            signal.raise_signal(exc.signum)  # the default action: the process ends, as it would have


class HeldSigint:
    """Ctrl-C held back while prov-trace finishes what must not be cut (the trace's end, the report).

    ``install()`` replaces a SIGINT handler that would raise (Python's default) with one that only
    remembers the signal (``got``) and says once that the run is finishing; ``restore()`` puts the
    previous handler back. An ignored SIGINT stays ignored. Main thread only.
    """

    def __init__(self, say: Callable[[str], None] | None = None):
        self._previous: Any = None
        self._say = say
        self.got = 0

    def install(self) -> None:
        if self._previous is not None:
            return
        try:
            if threading.current_thread() is not threading.main_thread():
                return
            previous = signal.getsignal(signal.SIGINT)
            if previous in (signal.SIG_IGN, None):
                return
            signal.signal(signal.SIGINT, self._handle)
            self._previous = previous
        except (ValueError, OSError, AttributeError):
            self._previous = None

    def _handle(self, signum: int, frame: Any) -> None:
        self.got += 1
        if self.got == 1 and self._say is not None:
            try:
                self._say("interrupted: finishing the trace and the report first")
            except Exception:  # noqa: BLE001 - a message must not break the finishing
                pass

    def restore(self) -> None:
        if self._previous is not None:
            try:
                signal.signal(signal.SIGINT, self._previous)
            except (ValueError, OSError):
                pass
            self._previous = None


def outcome(exc_type: type[BaseException] | None, exc: BaseException | None) -> tuple[str, str | None]:
    """How traced code ended, as a stream's end record says it: (outcome, detail)."""
    if exc_type is None:
        return "ok", None
    if issubclass(exc_type, KeyboardInterrupt):
        return "interrupted", "KeyboardInterrupt"
    if issubclass(exc_type, Terminated):
        return "signal", exc.name  # type: ignore[union-attr]
    if issubclass(exc_type, SystemExit):
        return "exit", f"SystemExit({exc.code!r})"  # type: ignore[union-attr]
    return "exception", "".join(traceback.format_exception_only(exc_type, exc)).strip()
