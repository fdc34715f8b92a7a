"""SIGTERM during a traced run: a clean stop, like Ctrl-C.

The handler raises `Terminated` in the main thread, which unwinds the traced
program; the trace gets an end record (outcome ``signal``), the report is
written, and the run exits 128 + 15. It is installed only where SIGTERM has its
default action (a program started with SIGTERM ignored keeps ignoring it), and
the previous handler is put back when the run ends. A SIGTERM that comes after
the program ended is remembered: the trace and report are finished first.

Python cannot raise out of a weakref callback, a ``__del__`` or a garbage-collector
callback: an exception raised there is printed as "Exception ignored in ..." and
dropped, and the program goes on. Untraced, SIGTERM would have ended it all the
same, so a `Terminated` that is dropped, or that the program catches and carries
on from, is raised again: at once where Python reports it unraisable (quietly:
the message is python's, not the program's), and every `RESEND_S` seconds while
the program runs on. `GIVE_UP_S` seconds after the signal, a program still
running gets the signal's default action, as untraced: the process ends at
once, after the trace gets its end record (``signal``) where the stream is not in
the middle of a write; the report is not written.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
import time
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
    """Turns SIGTERM into `Terminated` while `running()` is true; remembers a later one in `late`.

    A `Terminated` that does not unwind the program (see the module's docstring) is raised again until
    it does, or until the signal's default action ends the process.
    """

    #: Seconds between raising `Terminated` again while the program runs on after a SIGTERM.
    RESEND_S = 2.0
    #: Seconds after the SIGTERM when a program that still runs gets the signal's default action.
    GIVE_UP_S = 10.0

    def __init__(self, running: Callable[[], bool], on_give_up: Callable[[int], None] | None = None):
        self._running = running
        self._on_give_up = on_give_up
        self._previous: Any = None
        self._finishing = False
        self._pending: int | None = None
        self._wake = threading.Event()
        self._done = threading.Event()
        self._unraisable: Any = None
        self._deadline = 0.0
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

    @property
    def received(self) -> int | None:
        """The SIGTERM this run got, while the program ran or after it ended; None if none came."""
        return self._pending if self._pending is not None else self.late

    def finishing(self) -> None:
        """The program has ended: from here a SIGTERM is remembered in `late`, not raised."""
        self._finishing = True
        self._done.set()

    def _raising(self) -> bool:
        return not self._finishing and self._running()

    def _handle(self, signum: int, frame: Any) -> None:
        if self._raising():
            if self._pending is not None and time.monotonic() > self._deadline:
                # The program ran on past every raise: the signal's default action, as untraced.
                if self._on_give_up is not None:
                    try:
                        self._on_give_up(signum)
                    except BaseException:  # noqa: BLE001 - the process ends of the signal whatever happens here
                        pass
                signal.signal(signum, signal.SIG_DFL)
                signal.raise_signal(signum)
                return
            if frame is not None and frame.f_code is _ON_UNRAISABLE_CODE:
                self._wake.set()  # inside the hook that just dropped one: raise it again from the program
                return
            if self._pending is None:
                self._pending = signum
                self._deadline = time.monotonic() + self.GIVE_UP_S
                self._watch()
            raise Terminated(signum)
        if self.late is None:
            self.late = signum

    def _watch(self) -> None:
        """Raise `Terminated` again if the first one is dropped or caught (see the module's docstring)."""
        self._unraisable = sys.unraisablehook
        sys.unraisablehook = self._on_unraisable
        threading.Thread(target=self._resend, name="prov-trace-sigterm", daemon=True).start()

    def _on_unraisable(self, unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, Terminated):
            self._wake.set()  # python dropped it: raise it again at once, and print nothing
            return
        (self._unraisable or sys.__unraisablehook__)(unraisable)

    def _resend(self) -> None:
        signum = self._pending or signal.SIGTERM
        while True:
            self._wake.wait(self.RESEND_S)  # at once when python dropped it, else when the program caught it
            self._wake.clear()
            if self._done.is_set() or not self._raising():
                return
            try:
                _thread.interrupt_main(signum)  # the handler runs in the main thread and raises again
            except (ValueError, RuntimeError, TypeError):
                return

    def restore(self) -> None:
        self._done.set()
        self._wake.set()
        if self._unraisable is not None:
            if sys.unraisablehook == self._on_unraisable:
                sys.unraisablehook = self._unraisable
            self._unraisable = None
        if self._previous is not None:
            try:
                signal.signal(signal.SIGTERM, self._previous)
            except (ValueError, OSError):
                pass
            self._previous = None


_ON_UNRAISABLE_CODE = SigtermStop._on_unraisable.__code__


class SigtermUnwinds:
    """While the body runs, a SIGTERM that would kill the process at once (its default action) raises
    `Terminated` instead, so the body's ``except``/``finally`` can clean up (a half-written temporary file);
    afterwards the signal is raised again with its default action, and the process ends as SIGTERM ends it.

    Does nothing outside the main thread, or where SIGTERM has a handler (or is ignored) already.
    """

    def __init__(self) -> None:
        self._previous: Any = None
        self._got: int | None = None

    def __enter__(self) -> "SigtermUnwinds":
        try:
            if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                self._previous = signal.signal(signal.SIGTERM, self._handle)
        except (ValueError, OSError, AttributeError):
            self._previous = None
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self._got = signum
        raise Terminated(signum)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._previous is None:
            return
        signal.signal(signal.SIGTERM, self._previous)
        self._previous = None
        if exc_type is not None and issubclass(exc_type, Terminated):
            signal.raise_signal(exc.signum)  # the default action: the process ends, as it would have
        elif self._got is not None:  # python dropped the raise (a weakref callback, a __del__): end all the same
            signal.raise_signal(self._got)


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
