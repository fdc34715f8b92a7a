"""Every process of a run: child processes traced from their first line, one stream each.

Done the way coverage.py follows subprocesses: `prov-trace run` puts two variables in the
environment its program inherits, ``PROV_TRACE_FOLLOW`` (what to trace and where the
streams go, as JSON) and ``PROV_TRACE_RUN_ID`` (the run's id), and puts this package's
``boot/`` directory first on ``PYTHONPATH``. Every Python process started under it
(multiprocessing and torch.multiprocessing spawn and forkserver workers, subprocess
children, the workers torchrun's elastic agent starts) imports ``boot/sitecustomize.py``
at start-up, before it runs any code of its own. That module costs the process about a
millisecond: it claims the process's rank (below) and waits for ``torch`` to be imported,
and starts the tracer then (no compile can come before), so a process that never imports
torch pays nothing more. Then it hands over to any other ``sitecustomize`` on the path.

A child's stream is deferred: nothing is written until its first compile, so a child that
never compiles (a DataLoader worker, a compile worker, the elastic agent) leaves no file.
A forked child gets a stream of its own the same way, or none when following is off
(``stream/writer.py`` and ``tracer/session.py`` make sure it never writes its parent's).

Each stream is named, and its header says, which process wrote it: ``rank-N.msgpack``
when the process is a rank (``RANK`` set by its launcher, it being the process the
launcher started), else ``pid-N.msgpack``; the header carries host, pid, parent pid,
rank, local rank, world size, the run id and the elastic job's id (docs/trace-format.md).
How a child's stream ends: its end record is written when its interpreter exits (``ok``,
or ``exception`` for an uncaught one), when a multiprocessing worker finishes (even one
that leaves by ``os._exit``), or on SIGTERM (``signal``), after which the process dies of
the signal as it would have untraced. docs/processes.md is the user's guide.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
from typing import Any, Callable

#: What a followed child traces, and where its stream goes (JSON of `Config`).
ENV = "PROV_TRACE_FOLLOW"
#: The run's id: every stream of one run carries it in its header.
RUN_ENV = "PROV_TRACE_RUN_ID"
#: The pid of the process that holds ``RANK``: its own children inherit ``RANK`` but are not that rank.
RANK_OF_ENV = "PROV_TRACE_RANK_OF"
#: The directory whose ``sitecustomize.py`` starts a tracer in each child.
BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boot")
#: Children's streams beside a file ``-o t.msgpack`` go into ``t.procs/``.
PROCS_SUFFIX = ".procs"
CONFIG_VERSION = 1


class Config:
    """What every followed process of a run traces, and where its stream goes.

    (A plain class, not a dataclass: this module is imported at every followed process's start,
    and dataclasses would cost each of them more than everything else here.)
    """

    FIELDS = ("dir", "run", "profile", "backend", "probes", "probes_file", "keep_caches", "tool_id", "version")

    def __init__(self, dir: str, run: str, profile: str, backend: str = "auto", probes: list[str] | None = None,
                 probes_file: str | None = None, keep_caches: bool = False, tool_id: int | None = None,
                 version: int = CONFIG_VERSION):
        self.dir, self.run, self.profile, self.backend = dir, run, profile, backend
        self.probes = list(probes or [])
        self.probes_file, self.keep_caches, self.tool_id, self.version = probes_file, keep_caches, tool_id, version

    def to_env(self) -> str:
        import json

        return json.dumps({k: getattr(self, k) for k in self.FIELDS}, separators=(",", ":"))

    @classmethod
    def from_env(cls, environ: Any = None) -> "Config | None":
        """The config in the environment, or None (none, or not one this version reads)."""
        import json

        text = (os.environ if environ is None else environ).get(ENV)
        if not text:
            return None
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("version") != CONFIG_VERSION:
                return None
            return cls(**{k: data[k] for k in cls.FIELDS if k in data})
        except (ValueError, TypeError):
            return None


# --- who this process is ----------------------------------------------------------------------


def _int_env(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def claim_rank() -> None:
    """At a followed process's start: it is the rank its ``RANK`` names unless an ancestor claimed it."""
    if "RANK" in os.environ and not os.environ.get(RANK_OF_ENV):
        os.environ[RANK_OF_ENV] = str(os.getpid())


class StartOnImport:
    """A finder first on ``sys.meta_path`` that calls `start` once, when `module` (or a submodule) is first
    imported, before that import goes on; it finds nothing itself and leaves the path at once."""

    def __init__(self, module: str, start: Callable[[], None]):
        self.module = module
        self.start = start

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname == self.module or fullname.startswith(self.module + "."):
            try:
                sys.meta_path.remove(self)
            except ValueError:
                return None
            try:
                self.start()
            except Exception:  # noqa: BLE001 - an untraced process, never a broken import
                pass
        return None


def stand_down() -> None:
    """No followed-child tracer will start in this process any more (a trace of its own is starting)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, StartOnImport)]


def identity(*, claim: bool = True) -> dict[str, Any]:
    """This process as a stream's header says it: host, pid, parent pid, and its rank when it is one.

    A process is a rank when ``RANK`` is set and it is the process its launcher started: the
    first traced process that sees a ``RANK`` claims it (``PROV_TRACE_RANK_OF``), so its own
    children (a DataLoader worker, a helper it spawns or forks), which inherit ``RANK``, are not
    taken for it. `claim` False only reads.
    """
    import socket

    pid = os.getpid()
    rank = _int_env("RANK")
    if rank is not None:
        owner = os.environ.get(RANK_OF_ENV)
        if owner and owner != str(pid):
            rank = None
        elif claim and not owner:
            os.environ[RANK_OF_ENV] = str(pid)
    job = os.environ.get("TORCHELASTIC_RUN_ID")
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "ppid": os.getppid(),
        "rank": rank,
        "local_rank": _int_env("LOCAL_RANK") if rank is not None else None,
        "world_size": _int_env("WORLD_SIZE") if rank is not None else None,
        "restart": _int_env("TORCHELASTIC_RESTART_COUNT") if rank is not None else None,
        "job_id": job if job and job != "none" else None,
        "run_id": os.environ.get(RUN_ENV) or None,
    }


def stream_name(ident: dict[str, Any]) -> str:
    """``rank-N`` for a rank (``rank-N-restart-M`` after an elastic restart), else ``pid-N``."""
    if ident.get("rank") is not None:
        name = f"rank-{ident['rank']}"
        if ident.get("restart"):
            name += f"-restart-{ident['restart']}"
        return name
    return f"pid-{ident['pid']}"


def header_of(path: str) -> dict[str, Any] | None:
    """A stream's header (its first record only), or None."""
    import msgpack

    from prov_trace.stream import schema

    try:
        with open(path, "rb") as f:
            unpacker = msgpack.Unpacker(f, read_size=64 * 1024, **schema.UNPACK_OPTIONS, **schema.READ_LIMITS)
            head = unpacker.unpack()
    except Exception:  # noqa: BLE001 - not a stream, or unreadable
        return None
    return head if isinstance(head, dict) else None


def header_run_id(path: str) -> str | None:
    """The run id in a stream's header, or None."""
    head = header_of(path) or {}
    return head.get("run_id") if isinstance(head.get("run_id"), str) else None


def _replaceable(path: str, ident: dict[str, Any]) -> bool:
    """A stream an earlier run on this host wrote (a rerun replaces it, as it replaces prov-trace.msgpack);
    never one of this run (a reused pid), nor one another host wrote (a shared directory), nor a file
    that is not a stream."""
    head = header_of(path)
    if head is None:
        return False
    same_run = (ident.get("run_id") and head.get("run_id") == ident["run_id"]) or (
        ident.get("job_id") and head.get("job_id") == ident["job_id"])
    return not same_run and head.get("host") == ident.get("host")


def claim_path(directory: str, ident: dict[str, Any]) -> str:
    """Where this process's stream goes in `directory`: ``NAME.msgpack``, or, where a file of that name
    must be kept (`_replaceable`), ``NAME-2.msgpack``, ``NAME-3.msgpack``, ..."""
    base = stream_name(ident)
    path = os.path.join(directory, base + ".msgpack")
    n = 1
    while os.path.exists(path) and not _replaceable(path, ident):
        n += 1
        path = os.path.join(directory, f"{base}-{n}.msgpack")
    return path


# --- the parent: prov-trace run ---------------------------------------------------------------


def is_dir_output(output: str) -> bool:
    """`-o` names a directory when it ends with a separator or is an existing directory."""
    return output.endswith(("/", os.sep)) or os.path.isdir(output)


def children_dir(output: str) -> str:
    """Where followed children's streams go: in `-o DIR/` itself; beside `-o t.msgpack`, in ``t.procs/``."""
    if is_dir_output(output):
        return os.path.abspath(output)
    root, ext = os.path.splitext(os.path.abspath(output))
    return (root if ext else os.path.abspath(output)) + PROCS_SUFFIX


def parent_path(output: str, ident: dict[str, Any]) -> str:
    """The parent's own stream: `-o FILE` itself, or in `-o DIR/` named as any process's."""
    if is_dir_output(output):
        return claim_path(output, ident)
    return output


def own_rank() -> int | None:
    """This process's rank when it is a rank of a job of more than one process, else None."""
    ident = identity(claim=False)
    return ident["rank"] if ident["rank"] is not None and (ident["world_size"] or 0) > 1 else None


def with_rank(path: str, rank: int) -> str:
    """``t.msgpack`` -> ``t.rank-3.msgpack``: a file of its own for each rank running prov-trace itself."""
    root, ext = os.path.splitext(path)
    return f"{root}.rank-{rank}{ext}"


def new_run_id() -> str:
    """The run id: the one in ``PROV_TRACE_RUN_ID`` when set (several nodes of one job), else a new one."""
    import uuid

    return os.environ.get(RUN_ENV) or uuid.uuid4().hex[:12]


class Following:
    """While a traced program runs: the environment its children inherit, put back afterwards."""

    def __init__(self, config: Config | None, run_id: str):
        self.config = config
        self.run_id = run_id
        self._saved: dict[str, str | None] = {}

    def _set(self, name: str, value: str) -> None:
        if name not in self._saved:
            self._saved[name] = os.environ.get(name)
        os.environ[name] = value

    def __enter__(self) -> "Following":
        self._set(RUN_ENV, self.run_id)
        if self.config is not None:
            self._set(ENV, self.config.to_env())
            path = os.environ.get("PYTHONPATH")
            parts = [p for p in (path or "").split(os.pathsep) if p]
            if BOOT_DIR not in parts:
                self._set("PYTHONPATH", os.pathsep.join([BOOT_DIR, *parts]))
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved.clear()

    def streams(self, exclude: str | None = None) -> list[str]:
        """The streams this run's followed children wrote (their header holds this run's id)."""
        if self.config is None or not os.path.isdir(self.config.dir):
            return []
        out = []
        for name in sorted(os.listdir(self.config.dir)):
            path = os.path.join(self.config.dir, name)
            if not name.endswith(".msgpack") or not os.path.isfile(path):
                continue
            if exclude and os.path.abspath(path) == os.path.abspath(exclude):
                continue
            if header_run_id(path) == self.run_id:
                out.append(path)
        return out


# --- a child ----------------------------------------------------------------------------------


def child_options() -> dict[str, Any] | None:
    """What a new child process's tracer is built from (``api.Tracer(**options)``), or None: not followed.

    Read from the environment its parent left; the stream is deferred (written from the first compile).
    """
    config = Config.from_env()
    if config is None or sys.flags.no_site:
        return None
    ident = identity()
    return {
        "output": claim_path(config.dir, ident),
        "profile": config.profile,
        "backend": config.backend,
        "probes": list(config.probes),
        "probes_file": config.probes_file,
        "keep_caches": config.keep_caches,
        "tool_id": config.tool_id,
        "header": {**ident, "follow": "child"},
        "defer": True,
    }


def fork_stream() -> tuple[str, dict[str, Any]] | None:
    """In a forked child: the path and header keys of its own stream, or None when following is off."""
    config = Config.from_env()
    if config is None:
        return None
    ident = identity(claim=False)  # a forked child is never its parent's rank
    ident["rank"] = ident["local_rank"] = ident["world_size"] = ident["restart"] = None
    return claim_path(config.dir, ident), {**ident, "follow": "fork"}


def end_stream(tracer: Any, outcome: str, detail: str | None) -> None:
    """End `tracer`'s stream (at exit, from a signal handler): skipped where a handler interrupted a write of it."""
    session = getattr(tracer, "session", None)
    if session is None or not session.active:
        return
    if not session.writer.idle():  # a handler that interrupted this very thread's write: leave the stream cut
        return
    tracer.stop(outcome, detail)


def _at_exit(tracer: Any) -> None:
    """The interpreter is exiting: end the stream, saying whether an uncaught exception ended the program."""
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    try:
        if isinstance(exc, KeyboardInterrupt):
            end_stream(tracer, "interrupted", "KeyboardInterrupt")
        elif exc is not None:
            end_stream(tracer, "exception", f"{type(exc).__name__}: {exc}"[:2000])
        else:
            end_stream(tracer, "ok", None)
    except Exception:  # noqa: BLE001 - never change how the host exits
        pass


class _EndOnSigterm:
    """SIGTERM in a followed process: end the stream (``signal``), then die of the signal as untraced."""

    def __init__(self, tracer: Any):
        self.tracer = tracer

    def __call__(self, signum: int, frame: Any) -> None:
        try:
            end_stream(self.tracer, "signal", signal.Signals(signum).name)
        except BaseException:  # noqa: BLE001 - the process dies of the signal whatever happens here
            pass
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)


def _sigterm_is_default_or_ours() -> bool:
    from prov_trace.signals import SigtermStop

    h = signal.getsignal(signal.SIGTERM)
    return h == signal.SIG_DFL or isinstance(h, _EndOnSigterm) or isinstance(getattr(h, "__self__", None), SigtermStop)


def _arm_sigterm(tracer: Any) -> None:
    try:
        if _sigterm_is_default_or_ours():
            signal.signal(signal.SIGTERM, _EndOnSigterm(tracer))
    except (ValueError, OSError, AttributeError):  # not the main thread, or no SIGTERM here
        pass


def _mp_finalizer(tracer: Any) -> None:
    """In a multiprocessing worker (after its bootstrap): end the stream when the worker finishes,
    even though it leaves by ``os._exit`` (which skips atexit)."""
    mpu = sys.modules.get("multiprocessing.util")
    if mpu is not None:
        mpu.Finalize(None, end_stream, args=(tracer, "ok", None), exitpriority=-100)


def arm(tracer: Any) -> None:
    """A followed process's stream ends when the process does: at exit, at a multiprocessing worker's end, on SIGTERM."""
    atexit.register(_at_exit, tracer)
    _arm_sigterm(tracer)
    if _in_multiprocessing_child():
        # A forkserver (or spawn) worker whose tracer started here, as it imported torch: it leaves by
        # os._exit after its target (forkserver), which skips atexit. Its bootstrap clears the finalizers
        # registered before it and then runs the after-fork hooks; one registered from inside the target
        # stays. Either way one finalizer ends the stream when the worker finishes.
        mpu = sys.modules.get("multiprocessing.util")
        try:
            mpu.register_after_fork(tracer, _mp_finalizer)  # type: ignore[union-attr]
            _mp_finalizer(tracer)
        except Exception:  # noqa: BLE001
            pass


def _in_multiprocessing_child() -> bool:
    """Whether this process is a multiprocessing worker: being prepared (its main module imported) or running."""
    mp = sys.modules.get("multiprocessing")
    if mp is None or sys.modules.get("multiprocessing.util") is None:
        return False
    try:
        current = mp.current_process()
        return bool(getattr(current, "_inheriting", False)) or mp.parent_process() is not None
    except Exception:  # noqa: BLE001
        return False


def arm_forked(tracer: Any | None) -> None:
    """In a forked child, from the fork handler: its own stream (`tracer`) ends when it does; with none,
    SIGTERM does what it would untraced (the parent's handler would otherwise act for a stream this
    process does not write)."""
    if tracer is None:
        try:
            if _sigterm_is_default_or_ours() and signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except (ValueError, OSError, AttributeError):
            pass
        return
    _arm_sigterm(tracer)
    mpu = sys.modules.get("multiprocessing.util")
    if mpu is not None:  # run by the worker's bootstrap, after it clears the finalizers it inherited
        try:
            mpu.register_after_fork(tracer, _mp_finalizer)
        except Exception:  # noqa: BLE001
            pass
