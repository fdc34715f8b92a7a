"""prov-trace's Python API, and the orchestration of `prov-trace run`.

``trace()`` (or ``start()``/``stop()``) traces every compile in this process
into a stream and hands back a `Report`; ``load()`` reads a saved stream;
``run()`` is what ``prov-trace run`` does: audit a model, or run a script or a
module as python would, under a trace, then write the report. The command line
only parses arguments and maps `ProvTraceError` to exit statuses.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

from prov_trace import files, runner, torchver, voice
from prov_trace import follow as following
from prov_trace.contract import Hook
from prov_trace.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, ProvTraceError, UsageError
from prov_trace.progress import Progress
from prov_trace.signals import HeldSigint, SigtermStop, Terminated, outcome

if TYPE_CHECKING:
    from prov_trace.report.report import Report

DEFAULT_TRACE = "prov-trace.msgpack"
DEFAULT_REPORT = "provenance_audit.md"

Log = Callable[[str], None]

__all__ = ["DEFAULT_REPORT", "DEFAULT_TRACE", "ProvTraceError", "Report", "RunResult", "Tracer", "UsageError",
           "backend_problem", "load", "load_run", "run", "start", "stop", "trace"]


def say(msg: str) -> None:
    """prov-trace's own messages: one line each on stderr."""
    print(f"{voice.name()}: {msg}", file=sys.stderr, flush=True)


def quiet(msg: str) -> None:
    pass


def _report_class() -> type:
    # Imported on first use: `prov-trace run` needs the report package only after the program ends.
    from prov_trace.report.report import Report

    return Report


def __getattr__(name: str) -> Any:
    if name == "Report":
        return _report_class()
    raise AttributeError(f"module 'prov_trace.api' has no attribute {name!r}")


def load(path: str | os.PathLike[str]) -> Any:
    """The report of a saved trace stream (a cut stream reads up to its last whole record); for a
    directory, the merged report of every process's stream in it (`load_run`)."""
    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"load() takes the path of a trace or of a directory of streams, not {path!r} "
                         f"({type(path).__name__})")
    if os.path.isdir(path):
        return load_run(path)
    return _report_class().load(path)


# --- where a run's time goes (bench/whole_process.py) -----------------------------------------

#: (name, wall-clock time) marks of this process's run; written as JSON to $PROV_TRACE_PHASES when set.
PHASES: list[tuple[str, float]] = []


def phase(name: str) -> None:
    """Mark the end of a phase of the run (a timestamp; costs one list append)."""
    PHASES.append((name, time.time()))


def _process_start() -> float | None:
    """When this process started (Linux: /proc), for the phase before prov-trace's own code runs."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        # Seconds since boot now (10 ms resolution); /proc/stat's btime is whole seconds, too coarse.
        now = time.time()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return now - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def write_phases(trace: str | None) -> None:
    """With $PROV_TRACE_PHASES set, write the run's phase marks there as JSON (a benchmark's input)."""
    path = os.environ.get("PROV_TRACE_PHASES")
    if not path:
        return
    import json

    try:
        with open(path, "w") as f:
            json.dump({"process_start": _process_start(), "marks": PHASES, "trace": trace}, f)
    except OSError:
        pass


def load_run(*paths: str | os.PathLike[str], run: str | None = None) -> Any:
    """The merged report of several processes' streams: directories (their ``*.msgpack``) and files.

    A `RunReport` (report/ranks.py): ranks that compiled the same shown once, the ranks that diverge
    and how, each process's own `Report`. Streams of two different runs that both compiled raise
    UsageError naming them, unless `run` picks one; where the earlier runs' streams compiled nothing (a
    launcher's, left by running twice into one directory), the newest run is taken and the rest noted.
    """
    from prov_trace.report.ranks import RunReport

    return RunReport.load(list(paths), run=run)


def user_hooks(probes: Iterable[str | Hook] = (), probes_file: str | None = None) -> tuple[Hook, ...]:
    """The hooks of ``--probe`` specs (or Hook objects) and a ``--probes`` file; a wrong one is a UsageError."""
    from prov_trace.probes import user

    given = [probes] if isinstance(probes, (str, Hook)) else list(probes)  # one spec alone, not its characters
    hooks = [p for p in given if isinstance(p, Hook)]
    specs = [p for p in given if not isinstance(p, Hook)]
    try:
        parsed = [user.parse_spec(t) for t in specs]
        if probes_file:
            parsed += user.load_file(probes_file)
        return tuple(hooks) + user.hooks_for(parsed)
    except user.ProbeSpecError as exc:
        raise UsageError(str(exc)) from None


def backend_problem(backend: str, tool_id: int | None = None) -> str | None:
    """Why `backend` can't trace here, as one sentence; None when it can (or may: ``auto`` always can).

    Asked before a trace opens its output, so a backend that can't run leaves an earlier
    trace at that path as it was.
    """
    from prov_trace.tracer.core import BACKENDS, CHOICES

    if backend == "auto":
        return None
    cls = BACKENDS.get(backend)
    if cls is None:
        return f"there is no backend named '{backend}': choose one of {', '.join(CHOICES)}"
    reason = cls.unavailable_reason()
    if reason:
        return f"the {backend} backend can't run here: {reason}; use backend auto, which takes the best one available"
    if backend == "monitoring":
        mon = sys.monitoring
        ids = (tool_id,) if tool_id is not None else cls.TOOL_IDS  # type: ignore[attr-defined]
        held = [(i, mon.get_tool(i)) for i in ids]
        if all(holder is not None for _, holder in held):
            which = ", ".join(f"{i} (held by {holder!r})" for i, holder in held)
            return (f"the monitoring backend can't run here: sys.monitoring tool id{'s' if len(held) > 1 else ''} "
                    f"{which} {'are' if len(held) > 1 else 'is'} taken; use backend auto, which falls back to "
                    f"{'inject' if sys.version_info < (3, 14) else 'settrace'}"
                    + (", or another tool id" if tool_id is not None else ""))
    return None


# --- tracing in this process -----------------------------------------------------------------

_active_lock = threading.Lock()
_active: "Tracer | None" = None


def _graphs_compiled_so_far() -> int:
    """Graphs Dynamo compiled in this process so far (0 before torch._dynamo is imported). A call of one runs from
    Dynamo's cache: nothing compiles, so a trace started after it sees nothing (a notebook cell run again).
    0 after a `torch._dynamo.reset()` that nothing has been compiled since: the reset emptied the cache (it
    clears the frames Dynamo compiled, `convert_frame.input_codes`, but not the counter)."""
    utils = sys.modules.get("torch._dynamo.utils")
    frames = getattr(sys.modules.get("torch._dynamo.convert_frame"), "input_codes", None)
    try:
        if utils is None or (frames is not None and not frames.seen_ids):
            return 0
        return int(utils.counters["stats"]["unique_graphs"])
    except Exception:  # another torch's counters: the hint is a courtesy, never a failure
        return 0


class Tracer:
    """One trace in this process: a stream, a profile's hooks on a backend, from ``start()`` to ``stop()``.

    Use it as a context manager, or call ``start()`` and ``stop()``. One tracer runs at a
    time; starting a second while one runs raises UsageError. An exception in the body
    still ends the stream with its end record, and the exception goes on as it would.
    """

    def __init__(self, output: str | os.PathLike[str] | None = None, *, profile: str = "auto", backend: str = "auto",
                 probes: Iterable[str | Hook] = (), probes_file: str | None = None, keep_caches: bool = False,
                 tool_id: int | None = None, device: str | None = None, argv: list[str] | None = None,
                 header: dict[str, Any] | None = None, log: Log = quiet,
                 progress: bool | Callable[[dict[str, Any]], None] = False,
                 torch_spyre: str | os.PathLike[str] | None = None, defer: bool = False):
        problem = backend_problem(backend, tool_id)
        if problem:  # said before anything is opened or written
            raise UsageError(problem)
        self._temp = output is None
        self.path = os.path.abspath(os.fspath(output)) if output is not None else None
        self.profile_name = profile
        self.backend_name = backend
        self.hooks = user_hooks(probes, probes_file)
        self.keep_caches = keep_caches
        self._restore_caches: Callable[[], None] | None = None
        self.tool_id = tool_id
        #: `prov-trace run` of a script: ``__main__:fn`` targets wait for the script's own __main__.
        self.defer_main = False
        self.device = device
        self.argv = argv
        self.header = header or {}
        self.log = log
        #: True: live progress on stderr (a rewritten line on a terminal, else a line per stage per graph);
        #: a callable gets each probe record instead.
        self.progress = progress
        #: The stream is written from the first compile on (a followed child: one that never compiles leaves no file).
        self.defer = defer
        self._progress: Any = None
        #: A torch-spyre source tree to compile through (``--torch-spyre``); its StandIn once started.
        self.torch_spyre = torch_spyre
        self.standin: Any = None
        self.profile: Any = None
        self.session: Any = None
        self.writer: Any = None
        self._report: "Report | None" = None

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self.session is not None and self.session.active

    @property
    def ended(self) -> dict[str, Any] | None:
        """The end record once stopped: ``outcome`` (ok, exception, interrupted, signal, exit) and ``detail``."""
        return self.session.ended if self.session is not None else None

    def start(self) -> "Tracer":
        global _active
        from prov_trace.probes import profiles
        from prov_trace.stream.writer import StreamError, TraceWriter
        from prov_trace.tracer.core import BackendUnavailable
        from prov_trace.tracer.session import TraceSession

        _take_over_from_followed(self)
        check_torch(self.log)
        if self.torch_spyre is not None and self.session is None:
            spyre_profile_check(self.profile_name)
            self.standin = activate_spyre(self.torch_spyre, log=self.log)
            self.header = {**spyre_header(self.standin), **self.header}
        with _active_lock:
            if _active is not None:
                raise UsageError(f"a trace is already running in this process (writing {_active.path}): "
                                 "stop it before starting another")
            if self.session is not None:
                raise UsageError("this tracer has already run: make a new one to trace again")
            try:
                self.profile, why = profiles.choose(self.profile_name, device=self.device)
            except KeyError as exc:
                raise UsageError(exc.args[0]) from None
            if not self.keep_caches:
                self._restore_caches = runner.defeat_caches()
            try:
                self.log(f"profile {self.profile.name}: {why}")
                phase("profile chosen")
                if self.path is None:
                    fd, self.path = tempfile.mkstemp(prefix="prov-trace-", suffix=".msgpack")
                    os.close(fd)
                try:
                    self.writer = TraceWriter(self.path, defer=self.defer)
                except StreamError as exc:
                    raise UsageError(str(exc)) from None
                if self.progress is True:
                    self._progress = Progress()
                elif callable(self.progress):
                    self._progress = self.progress
                before = _graphs_compiled_so_far()
                self.session = TraceSession(self.writer, self.profile, backend=self.backend_name, argv=self.argv,
                                            log=self.log, extra_hooks=self.hooks,
                                            header_extra={**following.identity(), **self.header,
                                                          **({"compiled_before": before} if before else {})},
                                            tool_id=self.tool_id, observer=self._progress, defer_main=self.defer_main)
                self.session.on_fork = self._on_fork
                try:
                    self.session.start()
                except BackendUnavailable as exc:
                    self.writer.close()
                    self.session = None
                    raise UsageError(str(exc)) from None
            except BaseException:  # nothing traced: the caches as they were
                if self._restore_caches is not None:
                    self._restore_caches()
                    self._restore_caches = None
                raise
            _active = self
        return self

    def stop(self, outcome: str = "ok", detail: str | None = None) -> None:
        """End the stream (its end record says how the traced code ended). Stopping twice does nothing."""
        global _active
        if self.session is None:
            raise UsageError("this tracer was never started: call start() first")
        try:
            if self.session.ended is None:
                if self.session.active:
                    write_spyre_note(self.writer, self.standin)
                self.session.stop(outcome, detail)
        finally:
            if self._restore_caches is not None:  # the process's caches as the trace found them
                self._restore_caches()
                self._restore_caches = None
            if isinstance(self._progress, Progress):
                self._progress.close()
            with _active_lock:
                if _active is self:
                    _active = None

    def _on_fork(self) -> Any:
        """In a forked child of this process: a stream of its own when following is on (else none); see
        TraceSession.on_fork. Live progress stays with the parent: the child prints nothing of prov-trace's."""
        global _active, _active_lock
        from prov_trace.stream.writer import TraceWriter

        _active_lock = threading.Lock()  # another thread may have held it at the fork
        self._progress = None
        if self.session is not None:
            self.session.observer = None
        got = following.fork_stream()
        if got is None:
            if _active is self:
                _active = None
            following.arm_forked(None)
            return None
        path, header = got
        self.writer = TraceWriter(path, defer=True)
        self.path, self._report, self._temp = path, None, False
        self.header = {**self.header, "follow": header.get("follow")}
        following.arm_forked(self)
        return self.writer, header

    def __enter__(self) -> "Tracer":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop(*outcome(exc_type, exc))

    # --- results -------------------------------------------------------------------------

    @property
    def records(self) -> int:
        return self.writer.records_written if self.writer is not None else 0

    @property
    def bytes(self) -> int:
        return self.writer.bytes_written if self.writer is not None else 0

    @property
    def failure(self) -> str | None:
        """Why writing the stream stopped early (a full disk), else None."""
        return self.writer.failure if self.writer is not None else None

    def report(self) -> "Report":
        """The report of what was traced (read back from the stream; built once after stop())."""
        if self.path is None or self.writer is None:  # never an earlier run's file at the same path
            raise UsageError("this tracer was never started: there is nothing to report")
        if self.active:
            return _report_class().load(self.path)
        if self._report is None:
            self._report = _report_class().load(self.path)
        return self._report


def _take_over_from_followed(new: Tracer) -> None:
    """A trace the program starts itself (or a `prov-trace run` inside a followed process) takes over from
    the one prov-trace started in this process as a followed child: that one ends here, and the program's
    own trace runs as it would have untraced."""
    following.stand_down()
    old = _active
    if old is not None and old is not new and old.header.get("follow") in ("child", "fork"):
        old.stop("ok", "the program started a trace of its own")


def trace(output: str | os.PathLike[str] | None = None, *, profile: str = "auto", backend: str = "auto",
          probes: Iterable[str | Hook] = (), keep_caches: bool = False, **options: Any) -> Tracer:
    """Trace every compile in the ``with`` body, in this process::

        with prov_trace.trace() as t:
            torch.compile(model)(x)
        t.report().check("post_grad:stack_trace=all")

    `output` is the stream's path (None: a temporary file, ``t.path``). `probes` are
    ``--probe`` specs (``'pkg.mod:fn@both=stage'``). Other options: ``probes_file``,
    ``tool_id``, ``device`` (for ``profile='auto'``), ``log`` (a callable for prov-trace's messages),
    ``progress`` (True: each stage as it fires, on stderr).
    """
    return Tracer(output, profile=profile, backend=backend, probes=probes, keep_caches=keep_caches, **options)


def start(output: str | os.PathLike[str] | None = None, **options: Any) -> Tracer:
    """Start tracing this process (for code that can't use ``with``); ``stop()`` ends it."""
    return trace(output, **options).start()


def stop() -> "Report":
    """Stop the trace ``start()`` began, and return its report."""
    tracer = _active
    if tracer is None:
        raise UsageError("no trace is running in this process: call prov_trace.start() first")
    tracer.stop("ok")
    return tracer.report()


# --- torch-spyre (--torch-spyre DIR) ---------------------------------------------------------------

#: The shape of the note record that carries what the Spyre CPU stand-in recorded (report/spyre.py reads it).
SPYRE_NOTE = "spyre.standin"
#: What a Spyre model run defaults to where the user gave no --dtype: torch-spyre refuses float32 matmuls.
SPYRE_DTYPE = "float16"


_torch_warned: list[str] = []


def check_torch(log: Callable[[str], None]) -> None:
    """The installed torch against the supported range, before anything is traced: a UsageError (exit 2)
    below it; a one-line warning, once per process, above the newest release tested (docs/compat.md)."""
    version = torchver.installed()
    code, message = torchver.gate(version)
    if code:
        raise UsageError(message)
    if message and version not in _torch_warned:
        _torch_warned.append(version)
        log(message)


def spyre_profile_check(profile: str) -> None:
    if profile not in ("auto", "spyre"):
        raise UsageError(f"{voice.opt('--torch-spyre')} compiles through torch-spyre, which only the spyre profile "
                         f"watches: drop {voice.given('--profile', profile)}, or give {voice.given('--profile', 'spyre')}")


def activate_spyre(torch_spyre: str | os.PathLike[str], *, launch: str = "raise", log: Log = quiet) -> Any:
    """Make the torch-spyre source tree `torch_spyre` compile in this process, and return its ``StandIn``.

    The tree's own ``torch_spyre._C`` is used when it imports; else prov-trace's CPU stand-in
    (compile path real, kernels not run), which is said in one line. A directory that is not a
    torch-spyre tree, or a tree that needs ``_C`` symbols the stand-in lacks (named), is a
    UsageError. `launch` is what launching a compiled kernel does under the stand-in (``raise``
    or ``defer``: see ``prov_trace.standin.activate``). The same tree again returns the same StandIn.
    """
    from prov_trace import standin

    before = standin.active()
    try:
        active = standin.activate(torch_spyre, launch=launch)
    except standin.StandInError as exc:
        raise UsageError(str(exc)) from None
    if active is not before:
        if active.is_standin:
            log(f"{active.description}; torch-spyre from {active.tree}")
        else:
            log(f"torch-spyre from {active.tree}: {active.description}")
    return active


def spyre_header(active: Any) -> dict[str, Any]:
    """The trace header's keys for a torch-spyre run: the tree, real or stand-in, and the stand-in's line."""
    out: dict[str, Any] = {"torch_spyre": {"tree": active.tree, "mode": active.mode}}
    if active.is_standin:
        out["standin"] = active.description
    return out


def write_spyre_note(writer: Any, active: Any) -> None:
    """Before the end record: what the stand-in recorded, as one note record, so a report needs only the trace.

    torch-spyre's own ``register_kernel_provenance`` calls (each joined to its bundle directory),
    the bundles the ``dxp_standalone`` stand-in accepted, and the kernels launched and not run.
    """
    if active is None or not active.is_standin or writer is None:
        return
    from prov_trace.stream import schema

    try:
        body = {"shape": SPYRE_NOTE, "description": active.description, "tree": active.tree, "launch": active.launch,
                "kernel_provenance": active.kernel_provenance()[:10000],
                "bundles": [{k: c.get(k) for k in ("dir", "sdsc_files", "ops", "accepted", "error")}
                            for c in active.dxp_calls()[:10000]],
                "kernels_not_run": [c.get("kernel") for c in active.calls("launch_jobplan")][:10000],
                "counts": active.counts()}
    except Exception as exc:  # noqa: BLE001 - the trace must still end cleanly
        body = {"shape": SPYRE_NOTE, "description": active.description, "error": f"{type(exc).__name__}: {exc}"[:400]}
    writer.write(schema.NOTE, {"payload": body})


def spyre_inputs(model: Any, inputs: tuple, dtype: str, device: str) -> tuple[Any, tuple]:
    """The model and its inputs moved to `device` in `dtype` (floating tensors only), as torch-spyre takes them."""
    import torch

    tdtype = getattr(torch, dtype)
    model = model.to(dtype=tdtype).to(device)
    moved = tuple(t.to(dtype=tdtype if t.is_floating_point() else t.dtype).to(device) if isinstance(t, torch.Tensor)
                  else t for t in inputs)
    return model, moved


# --- prov-trace run ----------------------------------------------------------------------------


@dataclass
class RunResult:
    """How a `run` ended: its exit status, where the trace and report went, and the report itself."""

    exit_code: int
    trace: str
    report_path: str | None
    report: "Report | None" = None
    records: int = 0
    bytes: int = 0
    ended: dict[str, Any] | None = None
    #: The streams of the followed child processes that compiled (the report merges them with the trace).
    children: list[str] = field(default_factory=list)
    #: The signal python would have ended the program by: SIGINT for a KeyboardInterrupt it left uncaught
    #: (a Ctrl-C), SIGTERM when stopped by one; None otherwise. `exit_code` is then 128 + it, what a shell
    #: shows; the command line ends its process by the signal itself, once the trace and report are written.
    signal: int | None = None
    #: The working directory the program left. `run` puts the caller's back when the program ends (it puts
    #: back sys.argv and __main__ too); the command line returns to this one, where the program's exit
    #: handlers run as they would untraced.
    cwd: str | None = None


def _idle_probes(session: Any) -> list[str]:
    """The user's probes (--probe, --probes) that never fired, and why: the summary says it when there is a
    report; with --no-report only this does."""
    user = set(getattr(session, "user_hooks", ()) or ())
    states = [st for st in getattr(session, "states", None) or [] if st.hook in user]
    ran = {(st.hook.target, st.hook.stage) for st in states if st.fired or st.errors}
    out: dict[tuple, str] = {}  # one line per probe, though @both makes it two hooks
    for st in states:
        key = (st.hook.target, st.hook.stage)
        if key not in ran and key not in out:
            out[key] = (f"probe {st.hook.target} ({st.hook.stage}) never fired: "
                        + (st.reason or "the program did not call it"))
    return list(out.values())


def report_path_for(path: str, fmt: str) -> str:
    """The default report path takes the suffix of an explicit --format."""
    if path == DEFAULT_REPORT and fmt in ("html", "json"):
        return os.path.splitext(DEFAULT_REPORT)[0] + "." + fmt
    return path


def run(target: str | None, args: Iterable[str] = (), *, module: str | None = None, output: str = DEFAULT_TRACE,
        report: str | None = DEFAULT_REPORT, report_format: str = "auto", profile: str = "auto",
        backend: str = "auto", probes: Iterable[str] = (), probes_file: str | None = None,
        keep_caches: bool = False, tool_id: int | None = None, input_shape: str | tuple[int, ...] | None = None,
        dtype: str | None = None, device: str | None = None, train: bool = False, log: Log = say,
        progress: bool = True, torch_spyre: str | os.PathLike[str] | None = None, follow: bool = True,
        command: Iterable[str] | None = None) -> RunResult:
    """What ``prov-trace run`` does. Bad input raises UsageError before anything runs.

    `target` is a model (``file.py:Attr``, ``module:Attr``) or a script path; with `module`
    set, the module runs like ``python -m`` and `target`, when given, is its first argument.
    `report` None writes no report. The traced program's own failure is not raised: it is
    in the exit status, as python would give it. `progress` shows each stage as it fires, on stderr.
    `dtype` and `device` default to float32 and cpu.

    `torch_spyre` is a torch-spyre source tree to compile through (see `activate_spyre`), made
    ready before the model's module is imported and before tracing starts. A model then defaults
    to the spyre device in float16 (weights and inputs); under the CPU stand-in its compile is
    traced and its kernels are not run, which ends the run with exit status 0 and a note.

    `command` is the command line the trace header records (the report's Run row); by default one is
    rebuilt from the target and its arguments. The command line gives its own, options included.

    `follow` traces every Python process the program starts, each into its own stream
    (docs/processes.md): beside ``output`` in ``<output stem>.procs/``, or, when ``output`` names a
    directory (it ends with a separator, or is one), every stream in it, this process's too.
    """
    phase("run called")
    if isinstance(args, (str, bytes)):
        raise UsageError(f"args is one string ({args!r}): give the program's arguments as a list, "
                         f"e.g. args=shlex.split({args!r})")
    args = [os.fspath(a) if isinstance(a, os.PathLike) else a for a in args]
    bad = next((a for a in args if not isinstance(a, str)), None)
    if bad is not None:
        raise UsageError(f"args holds {bad!r} ({type(bad).__name__}): every argument is a string, as on a command line")
    from prov_trace.report.formats import FORMATS

    if report_format not in FORMATS:
        raise UsageError(f"there is no report format {report_format!r}: choose {', '.join(FORMATS)}")
    if isinstance(input_shape, (tuple, list)):  # (2, 128), as the API's caller naturally writes it
        input_shape = ",".join(map(str, input_shape))
    elif input_shape is not None and not isinstance(input_shape, str):
        raise UsageError(f"input_shape is {input_shape!r} ({type(input_shape).__name__}): give sizes as (2, 128) or '2,128'")
    following.stand_down()
    run_id = following.new_run_id()
    children_dir = following.children_dir(output)
    problem = backend_problem(backend, tool_id)
    if problem:
        raise UsageError(problem)
    kind = runner.classify(target, module)
    if kind == runner.MODULE and target is not None:
        args = [target, *args]
    if kind == runner.MODEL and args:
        raise UsageError(f"a model target takes no arguments, but got: {' '.join(args)}")
    hooks = user_hooks(probes, probes_file)
    rank = following.own_rank()
    voice.sign(rank)
    if following.is_dir_output(output):  # -o DIR/: this process's stream in it, named as any process's
        try:
            os.makedirs(output, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot make the trace directory {output}: {exc.strerror or exc}") from None
        output = following.parent_path(output, {**following.identity(claim=False), "run_id": run_id})
        if rank is not None and report is not None:  # one `prov-trace run` per rank: a report each, not one shared
            report = following.with_rank(report_path_for(report, report_format), rank)
            log(f"this process is rank {rank} of a multi-process job: its trace is {output} and its report {report} "
                f"(`prov-trace report {os.path.dirname(output) or '.'}` merges every rank's stream there)")
    elif rank is not None:  # one `prov-trace run` per rank (torchrun -m prov_trace run ...): a file each
        output = following.with_rank(output, rank)
        report = following.with_rank(report_path_for(report, report_format), rank) if report is not None else None
        log(f"this process is rank {rank} of a multi-process job: its trace is {output}"
            + (f" and its report {report}" if report is not None else "") + f" (give {voice.given('-o', 'DIR/')} for every rank's "
            "stream in one directory)")
    _refuse_report_named_trace(output)
    files.check_writable(output, "trace")
    fmt = None
    if report is not None:
        report = report_path_for(report, report_format)
        from prov_trace.report.formats import output_format, suffix_disagrees

        fmt = output_format(report, report_format)
        files.check_writable(report, "report")
        note = suffix_disagrees(report, report_format)
        if note:
            log(note)
        if files.same_file(report, output):
            raise UsageError(f"the report and the trace are the same file ({output}): give them different paths")
    trace_abs, report_abs = _checked_outputs(kind, target, module, output, report, probes_file)
    check_torch(log)
    restore_caches = runner.defeat_caches() if not keep_caches else None
    try:
        spyre = None
        if torch_spyre is not None:
            spyre_profile_check(profile)
            if kind == runner.MODEL and device is not None and device.split(":", 1)[0] != "spyre":
                # Elsewhere stock Inductor would compile it, under a report that says torch-spyre did.
                raise UsageError(f"{voice.opt('--torch-spyre')} compiles a model on the spyre device, not on {device}: "
                                 f"drop {voice.given('--device', device)}, or drop {voice.opt('--torch-spyre')} to "
                                 "compile it with stock Inductor")
            # A model is run once, so every graph compiles before the one error (a graph break needs that);
            # a script stops at its first launch, as it would on a machine without the device.
            spyre = activate_spyre(torch_spyre, launch="defer" if kind == runner.MODEL else "raise", log=log)
            if kind == runner.MODEL:
                device = device or "spyre"
                if dtype is None:
                    dtype = SPYRE_DTYPE
                    log(f"weights and inputs in {SPYRE_DTYPE}: torch-spyre refuses float32 matmuls ({voice.opt('--dtype')} chooses)")
                elif dtype == "float32":
                    log("warning: torch-spyre refuses float32 matmuls, so a model with one fails to compile in "
                        f"float32 ({voice.given('--dtype', SPYRE_DTYPE)} is its default)")
        dtype, device = dtype or "float32", device or "cpu"

        model = inputs = None
        model_device = None
        if kind == runner.MODEL:
            mt = runner.ModelTarget.parse(target)
            mod = runner.load_module(mt.module)
            if spyre is not None:
                model = runner.build_model(mod, mt.attr)
                inputs, origin = runner.example_inputs(model, mod, input_shape, dtype, "cpu")
                model, inputs = spyre_inputs(model, inputs, dtype, device)
            else:
                runner.check_device(device)
                model = runner.to_device(runner.build_model(mod, mt.attr), device)
                inputs, origin = runner.example_inputs(model, mod, input_shape, dtype, device)
            runner.check_arity(model, inputs, origin, mt.module)
            log(f"inputs from {origin}: " + ", ".join(runner.describe(i) for i in inputs))
            model_device = runner.model_device(model, device)
        elif kind == runner.SCRIPT and not os.path.isfile(target):
            raise UsageError(f"there is no file {target}: give the path to a Python script")
        elif kind == runner.MODULE and not runner.module_exists(module):
            raise UsageError(f"no module named {module}: check the name, or run from the directory that holds it")

        argv = list(command) if command is not None else \
            ["prov-trace", "run", *([f"-m {module}"] if module else []), *([target] if target and not module else []), *args]
        tracer = Tracer(trace_abs, profile=profile, backend=backend, probes=hooks, keep_caches=True, tool_id=tool_id,
                        device=model_device, argv=argv, log=log, progress=progress, torch_spyre=torch_spyre,
                        header={"target": target if not module else f"-m {module}", "target_kind": kind, "train": train,
                                "run_id": run_id, "follow": "parent" if follow else None})
        tracer.defer_main = kind != runner.MODEL
        phase("run set up")
        tracer.start()
    except BaseException:  # refused before the program ran: the caller's caches as they were
        if restore_caches is not None:
            restore_caches()
        raise
    phase("tracer started")
    config = following.Config(children_dir, run_id, tracer.profile.name, backend,
                              [p for p in probes if isinstance(p, str)],
                              os.path.abspath(probes_file) if probes_file else None, keep_caches, tool_id) if follow else None
    children = following.Following(config, run_id)
    pid = os.getpid()
    caller_cwd = _cwd()
    if kind != runner.MODEL and "torch._dynamo" in sys.modules:
        # A script run in a process that has compiled before (run() called again, a notebook): python would
        # start it with no compiled code, and Dynamo's caches would otherwise answer its compiles unseen.
        # (A model audit resets Dynamo itself; `prov-trace run` imports torch only in the program.)
        sys.modules["torch._dynamo"].reset()

    exit_code = EXIT_OK
    ended_by: int | None = None
    sigterm = SigtermStop(lambda: tracer.active,
                          on_give_up=lambda signum: following.end_stream(tracer, "signal", Terminated(signum).name))
    sigterm.install()
    held = HeldSigint(log)  # once the program ends, Ctrl-C waits until the trace and report are finished
    children.__enter__()
    try:
        try:
            if kind == runner.MODEL:
                not_run = spyre.KernelNotRun if spyre is not None and spyre.is_standin else ()
                try:
                    try:
                        runner.run_model(model, inputs, train=train)
                        if not_run:
                            spyre.check_kernels_run()
                    finally:
                        sigterm.finishing()
                        held.install()
                except not_run as exc:  # the stand-in compiled every graph; it runs no kernel
                    tracer.stop("ok", f"compiled; {len(exc.kernels)} Spyre kernel(s) not run (Spyre CPU stand-in)")
                    log(f"compiled and traced; {len(exc.kernels)} Spyre kernel(s) not run "
                        f"({', '.join(exc.kernels[:3])}{', ...' if len(exc.kernels) > 3 else ''}): the CPU stand-in "
                        "compiles, running them needs a Spyre card")
                except KeyboardInterrupt:
                    tracer.stop("interrupted", "KeyboardInterrupt")
                    exit_code, ended_by = EXIT_INTERRUPTED, signal.SIGINT
                except Terminated as exc:
                    tracer.stop("signal", exc.name)
                    exit_code, ended_by = exc.exit_code, exc.signum
                except BaseException as exc:  # the model's own failure: report it, keep the trace
                    tracer.stop("exception", f"{type(exc).__name__}: {exc}")
                    # (Not under torch-spyre: its device runs no eager op here, so the check could not tell.)
                    misfit = (runner.inputs_misfit(model, inputs, train=train)
                              if isinstance(exc, Exception) and spyre is None else None)
                    if misfit is not None:  # it fails uncompiled too: the inputs, not the compile
                        log(f"error: {type(model).__name__} fails on the inputs from {origin} without compiling too "
                            f"({misfit}): give inputs it takes ({voice.opt('--input-shape')}, or example_inputs() in its file); "
                            "the trace holds what was traced before the failure")
                        exit_code = EXIT_BAD_INPUT
                    else:
                        traceback.print_exception(exc)
                        exit_code = 1
                else:
                    tracer.stop("ok")
            else:
                try:
                    result = runner.run_program(module or target, args, as_module=kind == runner.MODULE,
                                                on_main=lambda mod, code: tracer.session.module_ready("__main__", mod, code))
                except KeyboardInterrupt:  # a second Ctrl-C while the runner was still reporting the first
                    result = runner.ScriptResult(EXIT_INTERRUPTED, "interrupted", "KeyboardInterrupt")
                finally:
                    sigterm.finishing()
                    held.install()
                tracer.stop(result.outcome, result.detail)
                exit_code = result.exit_code
                if result.outcome == "interrupted":  # an uncaught KeyboardInterrupt: python ends by SIGINT
                    ended_by = signal.SIGINT
                elif result.outcome == "signal" and exit_code > 128:  # stopped by prov-trace's SIGTERM handler
                    ended_by = exit_code - 128
                if spyre is not None and spyre.is_standin and (result.detail or "").split(":", 1)[0].endswith("KernelNotRun"):
                    log("the program stopped at its first Spyre kernel launch (the CPU stand-in compiles, it runs no "
                        "kernel): the trace holds every compile before it; the exit status is the program's")
        except Terminated as exc:  # in the instant between the program's end and the tracer's stop
            if tracer.ended is None:
                tracer.stop("signal", exc.name)
            exit_code, ended_by = exc.exit_code, exc.signum
        finally:
            if tracer.ended is None:
                tracer.stop("exception", "prov-trace stopped unexpectedly")
            children.__exit__(None, None, None)
        if os.getpid() != pid:  # a forked child of the program came back here: it ends as python would end it
            raise SystemExit(exit_code)
        program_cwd = _cwd()
        if caller_cwd is not None and program_cwd != caller_cwd:
            try:
                os.chdir(caller_cwd)
            except OSError:
                pass
        if restore_caches is not None:  # the caller's process as it was: Inductor's caches back on
            restore_caches()

        ended = tracer.ended or {}
        if ended.get("outcome") == "signal":
            log(f"stopped by {ended.get('detail')}: the trace and report hold what ran before it")
        if tracer.failure:
            log(f"warning: {tracer.failure}; the trace holds what was written before that")
        log(f"trace written to {output} ({tracer.records} records, {tracer.bytes} bytes)")
        phase("program ended")
        streams = children.streams(exclude=tracer.path)
        if streams:
            log((f"{len(streams)} child processes compiled, each traced into its own stream" if len(streams) != 1 else
                 "1 child process compiled, traced into its own stream")
                + f" in {os.path.relpath(children_dir)}{os.sep}: {', '.join(os.path.basename(p) for p in streams[:8])}"
                + (", ..." if len(streams) > 8 else ""))
        built = None
        if report is None:  # no summary will say it: a probe of the user's own that never ran is worth a line
            for text in _idle_probes(tracer.session):
                log(f"warning: {text}")
        if report is not None:
            # Absolute paths, taken before the program ran: it may have changed the working directory.
            if streams:
                built = _write_report(trace_abs, report_abs, fmt, log, shown=report, children=streams, run_id=run_id)
            else:
                built = _write_report(trace_abs, report_abs, fmt, log, shown=report)
                if not follow and built is not None and not built.model["graphs"]:
                    log("this process compiled nothing; any process the program started (torchrun's ranks, "
                        f"multiprocessing workers) was not traced, as {voice.opt('--no-follow')} asks")
    finally:
        sigterm.restore()
        held.restore()
    if held.got:  # a Ctrl-C while the trace and report were being finished
        exit_code, ended_by = EXIT_INTERRUPTED, signal.SIGINT
    if sigterm.received is not None:  # untraced, the SIGTERM would have ended the process, whatever it did after
        exit_code, ended_by = 128 + sigterm.received, sigterm.received
    phase("report written")
    write_phases(trace_abs)
    return RunResult(exit_code, trace_abs, report_abs, built, tracer.records, tracer.bytes, tracer.ended,
                     children=streams, signal=ended_by, cwd=program_cwd)


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the directory was removed
        return None


def _refuse_report_named_trace(output: str) -> None:
    """`prov-trace run -o audit.md`: -o names the trace stream, and `prov-trace report` takes -o for the
    report, so a report's suffix on the trace path is almost always the report meant. Refused before the
    program runs, rather than writing msgpack into a file named for Markdown, HTML or JSON."""
    from prov_trace.report.formats import NAMES, SUFFIXES

    named = SUFFIXES.get(os.path.splitext(output)[1].lower())
    if named is None:
        return
    stem = os.path.splitext(output)[0]
    raise UsageError(f"{voice.opt('-o')} names the trace (a msgpack stream), but {output} has a {NAMES[named]} "
                     f"report's suffix: write {voice.given('--report', output)} for the report, and give "
                     f"{voice.opt('-o')} a .msgpack path ({stem}.msgpack) for the trace, or leave it out")


def _checked_outputs(kind: str, target: str | None, module: str | None, output: str, report: str | None,
                     probes_file: str | None) -> tuple[str, str | None]:
    """The trace and report paths made absolute against the directory the run starts in (a script may
    chdir), once refused where they would overwrite one of the run's inputs or could not be read back."""
    inputs = runner.input_files(kind, target, module)
    if probes_file:
        inputs.append(("probes file", os.path.abspath(probes_file)))
    outputs = [("trace", output)] + ([("report", report)] if report is not None else [])
    files.refuse_inputs_as_outputs(outputs, inputs)
    if report is not None and files.output_kind(output) == "through":
        raise UsageError(f"the trace path {output} is {files.describe(output)}: the report is built by reading the "
                         f"trace back, which it cannot give; give {voice.opt('-o')} a regular file, or "
                         f"{'add' if voice.opt('--no-report') == '--no-report' else 'pass'} {voice.opt('--no-report')}")
    return os.path.abspath(output), (os.path.abspath(report) if report is not None else None)


def _write_report(trace_path: str, report_path: str, fmt: str, log: Log, shown: str | None = None,
                  children: list[str] = (), run_id: str | None = None) -> Any:
    """Build the run's report (merged over the children's streams when there are any) and write it."""
    shown = shown or report_path
    with _collector_paused():
        return _build_and_write(trace_path, report_path, fmt, log, shown, children, run_id)


@contextlib.contextmanager
def _collector_paused():
    """Keep the cyclic garbage collector off while the report is built, then put it back as it was.

    After a large compile the process holds hundreds of thousands of objects (the encoder's: ~700k), and
    every full collection the report's allocations trigger walks all of them: ~0.4 s of the encoder's
    1.3 s report. The report makes almost no cyclic garbage (its peak memory is the same with the
    collector off; docs/benchmarks.md), so pausing it costs nothing. Pausing, rather than `gc.freeze()`,
    leaves the permanent generation alone: a process that froze its own objects (or Python 3.12, which
    starts with some there) keeps them frozen. A program that turned the collector off keeps it off.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _build_and_write(trace_path: str, report_path: str, fmt: str, log: Log, shown: str,
                     children: list[str] | tuple[str, ...], run_id: str | None) -> Any:
    try:
        if children:
            from prov_trace.report.ranks import RunReport

            built = RunReport.load([trace_path, *children], run=run_id)
        else:
            # Report.load, a step at a time, so a benchmark can see each (bench/whole_process.py).
            report_class = _report_class()
            from prov_trace.report.model import build
            from prov_trace.stream.reader import read_trace

            phase("report modules imported")
            trace = read_trace(trace_path)
            phase("report: trace read")
            built = report_class(build(trace))
            phase("report: model built")
    except ProvTraceError as exc:  # a TraceReadError, or streams that are not one run
        log(f"no report: {exc}")
        return None
    if not children and not built.model["graphs"] and os.path.isfile(report_path):
        # A run that compiled nothing would replace a report of one that did with an empty one.
        log(f"the program compiled nothing (the trace holds no graph), so the existing report {report_path} was "
            f"kept; `prov-trace report {trace_path} -o {report_path}` writes this run's report over it")
        return built
    try:
        text = built.render(fmt)
        phase("report: rendered")
        files.write_atomic(report_path, text)
    except OSError as exc:
        log(f"could not write the report to {shown}: {exc.strerror or exc}")
    else:
        log(f"report written to {shown}" + (f" (over {1 + len(children)} processes' streams)" if children else ""))
    return built
