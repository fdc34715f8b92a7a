"""The `prov-trace` command line: parses arguments, calls the API, maps errors to exit statuses.

Exit status (also in `prov-trace --help` and the README):
  0  success (a model run with --torch-spyre on the CPU stand-in: compiled and traced, kernels not run)
  1  for `run` of a script: the script's own status (1 for an uncaught exception); a model whose
     compile fails (its traceback is printed)
  2  bad input: a usage error, a file that is not a trace, an output that cannot be written,
     model inputs the model fails on uncompiled too,
     a --torch-spyre DIR that is not a torch-spyre tree or needs _C symbols the stand-in lacks,
     a torch older than 2.10 (the oldest supported; one newer than the newest tested only warns)
  130  interrupted (Ctrl-C)
  143  stopped by SIGTERM (the trace gets its end record and the report is written first)
For `run`, 130 and 143 are what a shell shows: like python, the process ends by the signal itself
(SIGINT after the exit handlers; a parent sees the signal), once the trace and report are written.
A traced script's own exit status always wins for `run PROGRAM`.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import signal
import sys
import time
from typing import Any, Callable

import click

#: When the command line's module (and click) finished importing: the first phase mark of a run.
IMPORTED = time.time()

from prov_trace import torchver, voice
from prov_trace.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, ProvTraceError
from prov_trace.version import VERSION

DEFAULT_TRACE = "prov-trace.msgpack"
DEFAULT_REPORT = "provenance_audit.md"
from prov_trace.report.formats import FORMATS
PROFILES = ("auto", "inductor-cpu", "inductor-triton", "spyre")
BACKENDS = ("auto", "monitoring", "inject", "settrace")

_RUN_EXIT_HELP = """\b
Exit status:
  0    success; with --torch-spyre on the CPU stand-in, a model's compile was
       traced and its Spyre kernels were not run (a note on stderr says so)
  1    `run PROGRAM`: the program's own status (1 for an uncaught exception);
       a model whose compile fails (its traceback is printed)
  2    bad input: usage error, unreadable trace, unwritable output, model
       inputs the model fails on uncompiled too, a --torch-spyre DIR that is
       not a torch-spyre tree or needs _C symbols the stand-in lacks (named),
       a torch older than 2.10
  130  interrupted (Ctrl-C): ends by SIGINT, as python does
  143  stopped by SIGTERM: ends by it, as python does (trace and report are
       finished first)
"""
_REPORT_EXIT_HELP = """\b
Exit status:
  0    the report was written
  2    bad input: usage error, a file that is not a trace, an unwritable output
  130  interrupted (Ctrl-C)
"""
_TORCH_SPYRE_HELP = ("Compile through the torch-spyre source tree DIR (the folder holding torch_spyre/; also "
                     "$PROV_TRACE_TORCH_SPYRE). Its own torch_spyre._C is used when it imports; without a Spyre "
                     "card, prov-trace's CPU stand-in takes _C's place: the compile path is real (FX and IR passes, "
                     "OpSpecs, SuperDSC bundles), kernels are not run. See docs/spyre.md.")
_FORMAT_HELP = "Report format: md, html (one self-contained file), json. `auto` takes it from the output's suffix (.html, .json), else md."


def _printable(msg: str) -> str:
    """A message for the terminal: what came from the user's files or the trace (a path, a TOML value)
    may hold NUL or escape sequences, shown as \\xNN instead of reaching the terminal."""
    from prov_trace.report.text import clean

    return clean(msg)


def _say(msg: str) -> None:
    click.echo(f"{voice.name()}: {_printable(msg)}", err=True)


class _OwnStream:
    """Where `run` writes its own lines once the program may have run: the stream the process had when
    `run` began, whatever the program did to ``sys.stdout``/``sys.stderr`` since (a wrapper, a StringIO,
    None). When the program closed that stream, its file descriptor is written instead; a write that
    fails even so is dropped. prov-trace's output never raises into the program's exit."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        try:
            self.fd: int | None = stream.fileno()
        except Exception:  # noqa: BLE001 - a stream with no descriptor (click's test runner's)
            self.fd = None

    def line(self, text: str) -> None:
        try:
            if self.stream is not None and not self.stream.closed:
                self.stream.write(text + "\n")
                self.stream.flush()
                return
        except Exception:  # noqa: BLE001 - closed, broken, or not a stream any more
            pass
        if self.fd is not None:
            try:
                os.write(self.fd, (text + "\n").encode("utf-8", "replace"))
            except OSError:
                pass


class _StdoutFailed(Exception):
    """Standard output could not be written (a full disk, a device error): one sentence, exit 2."""

    def __init__(self, exc: OSError):
        super().__init__(exc.strerror or str(exc))


class _StdoutClosed(Exception):
    """The reader of standard output closed the pipe. Not an OSError: click would make that exit 1."""


def _out(text: str, nl: bool = True) -> None:
    """A line of a command's result on standard output. A reader that closed the pipe (`| head -1`) ends
    the command as it ends cat or grep, by SIGPIPE (`_StdoutClosed`); any other failure is `_StdoutFailed`."""
    try:
        click.echo(text, nl=nl)
    except BrokenPipeError:
        raise _StdoutClosed() from None
    except OSError as exc:
        raise _StdoutFailed(exc) from None


def _end_by_sigpipe() -> None:
    """The reader of standard output went away: end by SIGPIPE, as a shell pipeline's other tools do (no
    traceback, no "Exception ignored" at exit, and not an exit status that reads as the command's answer)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # nothing left to flush into the closed pipe at exit
    except (OSError, ValueError, AttributeError):
        pass
    if hasattr(signal, "SIGPIPE"):
        try:
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGPIPE)
        except (OSError, ValueError):
            pass
    sys.exit(1)


class CliError(click.ClickException):
    """A ProvTraceError on the command line: ``prov-trace: error: <one sentence>``, and its exit status."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT):
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: Any = None) -> None:
        click.echo(f"{voice.name()}: error: {_printable(self.format_message())}", err=True)


def _user_errors(fn: Callable) -> Callable:
    """Turn the API's ProvTraceError into a CliError with its exit status."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ProvTraceError as exc:
            note = _spyre_from_environment(str(exc))
            raise CliError(str(exc).rstrip(".") + note if note else str(exc), exc.exit_code) from None

    return wrapper


def _spyre_from_environment(message: str) -> str:
    """Where an error about torch-spyre comes from a tree the user set in the environment, not on the command
    line, a clause that says so (the message names --torch-spyre, or only the tree)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or "torch_spyre" not in ctx.params or "torch-spyre" not in message.lower():
        return ""
    if ctx.get_parameter_source("torch_spyre") != click.core.ParameterSource.ENVIRONMENT:
        return ""
    return " (the torch-spyre tree comes from PROV_TRACE_TORCH_SPYRE, set in the environment)"


#: What click 8.2+ raises for a bare group (8.1 printed the help and exited 0 itself).
_NO_ARGS_IS_HELP: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())  # () catches nothing


class _Group(click.Group):
    """Every error in one form, ``prov-trace: error: ...``, and Ctrl-C as exit 130, not click's ``Aborted!``."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            with voice.command_line():
                return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            with voice.command_line():  # messages name options as the command line spells them
                code = super().main(args, prog_name or "prov-trace", complete_var, standalone_mode=False, **extra)
        except (BrokenPipeError, _StdoutClosed):
            _end_by_sigpipe()
        except _StdoutFailed as exc:
            click.echo(f"{voice.name()}: error: could not write to standard output: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except CliError as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except _NO_ARGS_IS_HELP as exc:  # bare `prov-trace`: its help, as --help gives it (click 8.1 did this too)
            click.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
            sys.exit(EXIT_OK)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"{voice.name()}: error: {_printable(exc.format_message())}{hint}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except click.ClickException as exc:
            click.echo(f"{voice.name()}: error: {_printable(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo(f"{voice.name()}: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        if isinstance(code, _EndedBySignal):
            _end_by_signal(code.signal, int(code))
        sys.exit(code if isinstance(code, int) else EXIT_OK)


class _EndedBySignal(int):
    """`run`'s exit status (130, 143) when python would have ended the program by a signal, which it carries."""

    signal: int


def _end_by_signal(signum: int, fallback: int) -> None:
    """End the process the way python ends a program that a signal stopped, so that a parent (a shell
    loop, a job runner) sees the signal, not an exit status: for SIGINT, python runs its exit handlers and
    then kills itself with SIGINT (a KeyboardInterrupt raised from here, printed by no hook, does just
    that); for SIGTERM, whose default action ends a process at once, the process kills itself now."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a stream the program closed or replaced
            pass
    if signum == signal.SIGINT:
        sys.excepthook = lambda *exc: None
        raise KeyboardInterrupt
    try:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    except (OSError, ValueError):
        pass
    sys.exit(fallback)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]}, epilog=_RUN_EXIT_HELP)
@click.version_option(VERSION, prog_name="prov-trace")
def cli() -> None:
    """Trace where source provenance survives, and where it is dropped, through torch.compile.

    \b
    prov-trace run examples/reference_mlp.py:SimpleMLP   audit a model
    prov-trace run train.py --steps 3                    trace an existing compile script
    prov-trace run examples/export_aoti.py               trace torch.export + AOTInductor
    prov-trace report prov-trace.msgpack -o audit.md     rebuild the report from a trace

    Nothing is monkey-patched: the tracer watches only the compile pipeline's
    own functions (sys.monitoring on Python 3.12+), reads their arguments and
    results into plain data, and streams them to a msgpack file.
    Supports torch 2.10 and newer (docs/compat.md).
    """


class _RunCommand(click.Command):
    """A script's arguments after it are its own; a model target takes prov-trace options after it too."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from prov_trace.runner import ModelTarget

        takes_value = {o for p in self.params if isinstance(p, click.Option) and not p.is_flag for o in p.opts}
        i = 0
        while i < len(args):
            a = args[i]
            if a == "--":
                break
            if a.startswith("-"):
                i += 2 if (a in takes_value and "=" not in a) else 1
                continue
            if ModelTarget.parse(a) is not None and not os.path.isfile(a):
                args = args[:i] + args[i + 1:] + [a]
            break
        return super().parse_args(ctx, args)


_PATH_OUT = click.Path(dir_okay=False)
_PATH_IN = click.Path(dir_okay=False)


@cli.command(cls=_RunCommand, context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
             epilog=_RUN_EXIT_HELP)
@click.argument("target", required=False, type=click.Path())
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("-m", "module_name", metavar="MODULE", help="Run a module as a script, like `python -m MODULE ARGS...`.")
@click.option("-o", "--output", default=DEFAULT_TRACE, show_default=True, metavar="TRACE", type=click.Path(),
              help="Where to write the trace stream (msgpack; the report is --report, and a report's suffix "
                   "here, .md, .html or .json, is refused). Each child process that compiles writes its own "
                   "stream beside it, in TRACE's name with .procs for .msgpack (prov-trace.procs/). A directory "
                   "(a path ending in /, or an existing directory) holds every process's stream, this one's too: "
                   "rank-N.msgpack for a rank, else pid-N.msgpack. See docs/processes.md.")
@click.option("--report", "report_path", default=DEFAULT_REPORT, show_default=True, metavar="FILE", type=_PATH_OUT,
              help="Where to write the report (with --format html or json the default suffix follows the format).")
@click.option("--format", "report_format", type=click.Choice(FORMATS), default="auto", show_default=True, help=_FORMAT_HELP)
@click.option("--no-report", is_flag=True, help="Write only the trace; build the report later with `prov-trace report`. "
              "No per-stage summary is printed then, but a --probe that never fired is named on stderr.")
@click.option("--profile", type=click.Choice(PROFILES), default="auto", show_default=True,
              help="Which pipeline's hooks to watch. `auto` picks by the model's device (spyre, cuda, else cpu), "
                   "or for a script by the machine, and says why.")
@click.option("--probe", "probe_specs", multiple=True, metavar="TARGET",
              help="Also watch a function of your own: 'pkg.mod:Qual.name[@entry|@return|@both][=STAGE]' "
                   "(repeatable). Its snapshots become the report column STAGE. See docs/probes.md.")
@click.option("--probes", "probes_file", metavar="FILE.toml", type=click.Path(dir_okay=False),
              help="Probes from a TOML file of [[probe]] tables (target, event, stage). See docs/probes.md.")
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
              help="Event backend: monitoring (3.12+), inject (3.11-3.13: a probe call compiled into each target's "
                   "bytecode; the rewrites are kept in $PROV_TRACE_CACHE_DIR, else $XDG_CACHE_HOME/prov-trace or ~/.cache/prov-trace, for later "
                   "runs), settrace (any Python, slowest). `auto` takes the best available and says why.")
@click.option("--tool-id", type=click.IntRange(0, 5), default=None, metavar="ID",
              help="The sys.monitoring tool id to hold (monitoring backend). Default: 4, leaving 3 (the first id "
                   "no tool is assigned) to the program; 3 if 4 is taken; never 5 (CPython's optimizer). "
                   "The id held is in the trace header.")
@click.option("--input-shape", metavar="SHAPE", help="Model input shape, e.g. 2,128 (model targets only).")
@click.option("--dtype", default=None, help="Input dtype for --input-shape.  [default: float32; with --torch-spyre "
                                              "float16, weights too: torch-spyre refuses float32 matmuls]")
@click.option("--device", default=None, help="Device for the model and its inputs.  [default: cpu; spyre with "
                                               "--torch-spyre]")
@click.option("--eval/--train", "eval_mode", default=True, show_default=True,
              help="--eval runs one forward under torch.no_grad() (one inference graph); "
                   "--train also runs backward (forward and backward graphs).")
@click.option("-q", "--quiet", is_flag=True,
              help="No live progress. By default each stage is shown on stderr as it fires (one line rewritten "
                   "on a terminal; elsewhere a line per stage per graph).")
@click.option("--keep-caches", is_flag=True,
              help="Leave Inductor's caches on. By default they are defeated: a cache hit skips lowering and "
                   "codegen, and stages after post-grad would never fire.")
@click.option("--no-follow", is_flag=True,
              help="Trace this process only. By default every Python process the program starts (multiprocessing "
                   "and torch.multiprocessing workers, subprocess children, torchrun's ranks) is traced too, each "
                   "into its own stream, and the report merges them.")
@click.option("--torch-spyre", "torch_spyre", metavar="DIR", envvar="PROV_TRACE_TORCH_SPYRE", type=click.Path(),
              help=_TORCH_SPYRE_HELP + " A model goes to the spyre device in float16 and is run once: every graph "
                   "compiles, then the run ends with exit 0 and a note that its kernels were not run; a script "
                   "stops at its first kernel launch.")
@_user_errors
def run(target: str | None, args: tuple[str, ...], module_name: str | None, output: str, report_path: str,
        report_format: str, no_report: bool, profile: str, probe_specs: tuple[str, ...], probes_file: str | None,
        backend: str, tool_id: int | None, input_shape: str | None, dtype: str | None, device: str | None,
        eval_mode: bool, keep_caches: bool, quiet: bool, no_follow: bool, torch_spyre: str | None) -> int:
    """Trace one compile: a model target, a script, or a module.

    \b
    TARGET is one of:
      path/to/file.py:Attr   a model: Attr is an nn.Module subclass (built with no
      package.module:Attr    arguments) or a zero-argument function returning a module.
                             It is compiled once on the CPU with caches defeated and run once.
      path/to/script.py      a script, run unmodified the way `python` runs it, with ARGS;
                             every compile it makes is traced, with any torch.compile
                             backend, and torch.export + AOTInductor too.
    Use -m MODULE ARGS... to run a module like `python -m`.
    prov-trace's options go before a script (after it they are the script's own).

    \b
    Model inputs come from, in order: --input-shape (with --dtype, --device);
    a module-level example_inputs() in the target's file; the first layer with
    parameters (nn.Linear(in_features) gives (2, in_features)).

    Writes the trace (-o) and the Markdown report (--report), then prints a
    per-stage summary: which hooks resolved and fired, and how many objects
    each stage produced; then each compile that raised or hit Dynamo's
    recompile limit, each graph break with Dynamo's reason, and any notice of
    what prov-trace's own settings did to the program (with the caches off,
    torch saves no cache artifact).
    """
    from prov_trace import api

    api.PHASES.append(("prov-trace imported", IMPORTED))
    out, err = _OwnStream(sys.stdout), _OwnStream(sys.stderr)  # before the program can replace or close them

    def say(msg: str) -> None:
        err.line(f"{voice.name()}: {_printable(msg)}")

    result = api.run(target, args, module=module_name, output=output, report=None if no_report else report_path,
                     report_format=report_format, profile=profile, backend=backend, probes=probe_specs,
                     probes_file=probes_file, keep_caches=keep_caches, tool_id=tool_id, input_shape=input_shape,
                     dtype=dtype, device=device, train=not eval_mode, log=say, progress=not quiet,
                     torch_spyre=torch_spyre, follow=not no_follow, command=["prov-trace", *sys.argv[1:]])
    if result.cwd is not None:  # back where the program left it, for its exit handlers
        try:
            os.chdir(result.cwd)
        except OSError:
            pass
    if result.report is not None:
        lines = result.report.summary_lines()
        if lines and lines[0].startswith("prov-trace ") and voice.name() != "prov-trace":  # a rank's summary says whose
            lines[0] = voice.name() + lines[0][len("prov-trace"):]
        out.line("\n".join(lines))
    if result.exit_code != 0 and (module_name or (target is not None and ":" not in target)):
        program = [*(["-m", module_name] if module_name else []), *([target] if target is not None else [])]
        hint = _misplaced_options_hint(program, list(args))
        if hint:
            say(hint)
    if result.signal is not None:
        ended = _EndedBySignal(result.exit_code)
        ended.signal = result.signal
        return ended
    return result.exit_code


def _own_options(args: list[str]) -> tuple[list[str], list[str], list[str]]:
    """The options of `prov-trace run` among a program's own arguments (a likely mistake when it fails):
    their names, the arguments they take up (with their values), and the arguments left."""
    takes_value = {}
    for p in run.params:
        if isinstance(p, click.Option):
            for o in (*p.opts, *p.secondary_opts):
                takes_value[o] = not p.is_flag and not p.count
    names, taken, rest = [], [], []
    i = 0
    while i < len(args):
        a = args[i]
        opt = a.split("=", 1)[0]
        if opt in takes_value and opt not in ("-h", "--help"):
            if opt not in names:
                names.append(opt)
            taken.append(a)
            if takes_value[opt] and "=" not in a and i + 1 < len(args):
                taken.append(args[i + 1])
                i += 1
        else:
            rest.append(a)
        i += 1
    return names, taken, rest


def _misplaced_options_hint(program: list[str], args: list[str]) -> str | None:
    """One sentence for a failed program whose arguments hold prov-trace options, with the command as it
    should have been written; None when they hold none. `program` is the script (or -m MODULE and its
    first argument), `args` the rest."""
    if program[:1] == ["-m"]:
        head, args = program[:2], program[2:] + args
    else:
        head, args = program[:1], program[1:] + args
    names, taken, rest = _own_options(args)
    if not names:
        return None
    which = f"{names[0]} came after it, so the program got it" if len(names) == 1 else \
        f"{', '.join(names)} came after it, so the program got them"
    command = " ".join(shlex.quote(a) for a in ["prov-trace", "run", *taken]) + " ... " + \
        " ".join(shlex.quote(a) for a in [*head, *rest])
    return f"prov-trace options go before the program: {which}; write `{command}` (... for any other options)"


def _load(path: str) -> Any:
    from prov_trace.api import load

    return load(path)


def _load_run(paths: tuple[str, ...], run_id: str | None) -> Any:
    from prov_trace.api import load_run

    return load_run(*paths, run=run_id)


def _emit(text: str, output: str, what: str, reads: tuple[str, ...]) -> None:
    """Write `text` to `output` (`-`: stdout), refusing to overwrite a file it reads."""
    from prov_trace import files

    if output == "-":
        _out(text, nl=False)
        return
    for t in reads:
        if os.path.exists(t) and files.same_file(output, t):
            raise CliError(f"the {what} would overwrite the trace it reads ({t}): give another -o path")
    files.write_output(output, text, what)
    _say(f"{what} written to {output}")


_RUN_HELP = "With streams of several runs there, report the one with this run id (the header's run_id)."


def _load_many(paths: tuple[str, ...], run_id: str | None) -> Any:
    """One trace file: its Report, as ever. A directory or several files: the run's merged RunReport."""
    from prov_trace.api import load_run

    if len(paths) == 1 and not os.path.isdir(paths[0]) and run_id is None:
        return _load(paths[0])
    return load_run(*paths, run=run_id)


def _inputs(paths: tuple[str, ...]) -> tuple[str, ...]:
    """The stream files `paths` name (a directory's *.msgpack), for the never-overwrite-an-input check."""
    from prov_trace.report.ranks import find_streams

    try:
        return tuple(find_streams(list(paths))[0])
    except ProvTraceError:
        return paths


@cli.command(epilog=_REPORT_EXIT_HELP)
@click.argument("traces", metavar="TRACE...", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", default=DEFAULT_REPORT, show_default=True, metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="Where to write the report; `-` writes to stdout. A .html or .json suffix sets the format.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True, help=_FORMAT_HELP)
@click.option("--run", "run_id", metavar="ID", help=_RUN_HELP)
@_user_errors
def report(traces: tuple[str, ...], output: str, fmt: str, run_id: str | None) -> int:
    """Rebuild the report from a trace stream, without importing torch.

    Given a directory (what `run -o DIR/` wrote, a .procs directory, or the
    directories copied from several nodes into one) or several streams, one
    report over every process: the ranks that compiled the same shown once,
    a divergence section naming each rank that compiled differently and its
    first difference, then the reference rank's report (docs/processes.md).

    \b
    Formats (docs/report.md):
      md    Markdown: tables and a Mermaid lineage chart that GitHub renders
      html  one self-contained file (no network): a coloured matrix whose
            cells list their objects, a drawn lineage graph, clickable lines
      json  the report model, shaped as docs/report.schema.json says

    A trace cut short (a crash, a kill) is read up to its last whole record,
    and the report opens with a banner saying it is partial.
    """
    from prov_trace import files
    from prov_trace.api import report_path_for
    from prov_trace.report.formats import output_format, suffix_disagrees

    output = report_path_for(output, fmt)
    note = suffix_disagrees(output, fmt)
    fmt = output_format(output, fmt)
    reads = _inputs(traces)
    if output != "-":
        files.check_writable(output, "report")
        for trace in reads:
            if os.path.exists(trace) and files.same_file(output, trace):
                raise CliError(f"the report would overwrite the trace it reads ({trace}): give another -o path")
    rep = _load_many(traces, run_id)
    if note:
        _say(note)
    _emit(rep.render(fmt), output, "report", reads)
    if rep.partial:
        _say(f"the trace is partial: {rep.partial}")
    return EXIT_OK


_DIFF_EXIT_HELP = """\b
Exit status:
  0    compared (with --fail-on-regression: and nothing regressed)
  1    --fail-on-regression: B lost a graph A had, a field's population
       dropped at some stage, or a pass gives a node another line in B and
       not in A
  2    bad input: usage error, a file that is not a trace, an unwritable output
  130  interrupted (Ctrl-C)
"""


@cli.command(epilog=_DIFF_EXIT_HELP)
@click.argument("trace_a", metavar="A", type=click.Path())
@click.argument("trace_b", metavar="B", type=click.Path())
@click.option("-o", "--output", default="-", show_default=True, metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="Where to write the diff; `-` prints it. A .html, .json or .md suffix sets the format.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
              help="md, html or json; `auto` takes it from the output's suffix, else md.")
@click.option("--fail-on-regression", is_flag=True,
              help="Exit 1 when B lost a graph A had, any field's population dropped at any stage from A to B, or a "
                   "pass gives a node another line in B and not in A.")
@_user_errors
def diff(trace_a: str, trace_b: str, output: str, fmt: str, fail_on_regression: bool) -> int:
    """Compare two traces A (before) and B (after).

    \b
    For each graph (matched by compile id and kind) it lists:
      - per stage and field, population changes (✅ 3/3 → ◐ 1/3), marked
        dropped or rose;
      - objects (FX nodes, IR ops, kernels) added or removed at each stage,
        and lineage edges added or removed;
      - source lines whose provenance now ends at an earlier (or later) stage;
      - nodes a pass gives another line, new or gone in B.
    Source lines match by file and line. A file the traces name at different
    paths (a baseline from another checkout or machine) is paired by its
    name, and a line an edit moved is matched by its text.
    A field's population dropped when B populates a smaller fraction of a
    stage's objects than A did, or B did not measure that stage at all; a
    graph A has and B lacks (B compiled less, or nothing) is a regression too,
    and so is a node a pass gives another line in B and not in A.

    A or B may be a directory of a run's streams: then rank is compared with
    rank (a single trace against each rank of the other side), and a rank A
    has and B lacks is a regression.
    """
    from prov_trace import files
    from prov_trace.report import diff as _diff
    from prov_trace.report.formats import output_format, suffix_disagrees

    note = suffix_disagrees(output, fmt)
    fmt = output_format(output, fmt)
    if output != "-":
        files.check_writable(output, "diff")
        for t in (trace_a, trace_b):
            if os.path.exists(t) and files.same_file(output, t):
                raise CliError(f"the diff would overwrite the trace it reads ({t}): give another -o path")
    if os.path.isdir(trace_a) or os.path.isdir(trace_b):  # runs of several processes: rank against rank
        from prov_trace.api import load_run
        from prov_trace.report import ranks

        load, render, describe, inputs, noun = load_run, ranks.render_run_diff, ranks.describe, \
            _inputs((trace_a, trace_b)), ""
    else:
        load, render, describe, inputs, noun = _load, _diff.render, _diff.describe, (trace_a, trace_b), "trace "
    a, b = _load_side(load, trace_a, "A"), _load_side(load, trace_b, "B")
    d = a.diff(b)
    if note:
        _say(note)
    _emit(render(d, fmt), output, "diff", inputs)
    for which, rep in (("A", a), ("B", b)):
        if rep.partial:
            _say(f"{noun}{which} is partial: {rep.partial}")
    if fail_on_regression and d["regressions"]:
        _say(f"{len(d['regressions'])} regression(s): " + "; ".join(describe(r) for r in d["regressions"][:5]))
        return 1
    return EXIT_OK


def _load_side(load: Callable[[str], Any], path: str, which: str) -> Any:
    """One side of a diff; a directory of several runs' streams is refused with advice diff can follow (it has
    no --run: a side is one run)."""
    from prov_trace.report.ranks import SeveralRuns

    try:
        return load(path)
    except SeveralRuns as exc:
        raise CliError(f"{which} ({path}) holds streams of {exc.runs}: diff compares one run with another, so give a "
                       "directory of one run's streams (move the other runs' streams out of it)") from None


_CHECK_EXIT_HELP = """\b
Exit status:
  0    every rule holds
  1    some rule fails (each failure is listed)
  2    bad input: a rule that cannot be read or names no stage or field,
       a file that is not a trace
  130  interrupted (Ctrl-C)
"""


@cli.command(epilog=_CHECK_EXIT_HELP, short_help="Gate CI on provenance: rules over the Stage × Field matrix.")
@click.argument("traces", metavar="TRACE...", nargs=-1, required=True, type=click.Path())
@click.option("--require", "rules", multiple=True, metavar="RULE",
              help="A rule STAGE:FIELD=LEVEL or STAGE:FIELD>=FRACTION (repeatable), e.g. kernel_spec:origins=all, "
                   "'post_grad:stack_trace>=0.5', '*:stack_trace>=50%'; or 'graph_breaks<=N' on the run's graph "
                   "break sites, or 'moved_nodes<=N' on the nodes a pass gave another line. Quote a rule that holds "
                   "> or <.")
@click.option("--graph", "graphs", multiple=True, metavar="LABEL",
              help="Check only this graph, e.g. '0/0 inference' (repeatable). Default: every graph.")
@click.option("--require-ranks-agree", is_flag=True,
              help="Over a run's streams (a directory): fail when any rank compiled differently from rank 0 "
                   "(graphs, node or kernel counts, kernel names, a matrix cell), or a rank's stream is cut or missing.")
@click.option("--run", "run_id", metavar="ID", help=_RUN_HELP)
@_user_errors
def check(traces: tuple[str, ...], rules: tuple[str, ...], graphs: tuple[str, ...], require_ranks_agree: bool,
          run_id: str | None) -> int:
    """Gate CI on provenance: check rules over a trace's Stage × Field matrix.

    \b
    RULE := STAGE ":" FIELD OP LEVEL          (grammar: docs/check.md)
      STAGE  source, dynamo_graph, export_graph, pre_grad, aot_graph,
             post_grad, ir_pre, ir_post, kernel_spec, artifact,
             a user probe's stage, or * (each stage measuring FIELD)
      FIELD  a field of the matrix: stack_trace, nn_module_stack, origins, ...
      OP     = (== too) with LEVEL all | any | none
             = == >= > <= < with a fraction 0..1 or a percentage (50%)
    A rule holds when it holds in every graph. A stage that did not fire fails.
    RULE := "graph_breaks" OP COUNT counts the run's graph break sites (the
    lines Dynamo broke a graph at), each listed with Dynamo's reason when it fails.
    RULE := "moved_nodes" OP COUNT counts the nodes a pass gave another line
    (the report's "Where provenance moves to another line"), each listed.
    Quote each rule: in a shell, > and < redirect.

    \b
    Examples:
      prov-trace check t.msgpack --require 'kernel_spec:origins=all'
      prov-trace check t.msgpack --require 'post_grad:stack_trace>=0.5' --require 'ir_post:traceback=any'
      prov-trace check traces/ --require-ranks-agree --require 'kernel_spec:origins=all'
      prov-trace check t.msgpack --require 'graph_breaks<=0' --require 'moved_nodes<=0'

    Over a directory (or several streams) every process that compiled is
    checked; processes that compiled the same are checked once, named together.
    """
    from prov_trace.report import check as _check

    if not rules and not require_ranks_agree:
        raise CliError("nothing to check: give at least one --require RULE, or --require-ranks-agree")
    parsed = [_check.parse_rule(r) for r in rules]  # a bad rule is bad input before the trace is read
    rep = _load_many(traces, run_id) if not require_ranks_agree else _load_run(traces, run_id)
    if hasattr(rep, "agree"):
        result = rep.check(*(r.text for r in parsed), graphs=list(graphs) or None, require_ranks_agree=require_ranks_agree)
    else:
        result = rep.check(*(r.text for r in parsed), graphs=list(graphs) or None)
    _out(str(result), nl=False)
    if rep.partial:
        _say(f"the trace is partial: {rep.partial}")
    return EXIT_OK if result.ok else 1


_TARGETS_EXIT_HELP = """\b
Exit status:
  0    every target resolves and its signature has the arguments the probe reads
  1    some target drifted, or a --probe target is not found (each listed),
       or the profile's package is not installed here
  2    bad input: usage error, a malformed --probe or --probes file, a --torch-spyre
       DIR that is not a torch-spyre tree or needs _C symbols the stand-in lacks
"""


@cli.command(epilog=_TARGETS_EXIT_HELP, short_help="Resolve every target of a profile on this torch; runs nothing.")
@click.option("--profile", type=click.Choice(PROFILES), default="auto", show_default=True,
              help="The profile to check. `auto` picks by this machine.")
@click.option("--probe", "probe_specs", multiple=True, metavar="TARGET",
              help="Also check a user probe, 'pkg.mod:Qual.name[@entry|@return|@both][=STAGE]' (repeatable).")
@click.option("--probes", "probes_file", metavar="FILE.toml", type=click.Path(dir_okay=False),
              help="Also check the probes in a TOML file.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("--torch-spyre", "torch_spyre", metavar="DIR", envvar="PROV_TRACE_TORCH_SPYRE", type=click.Path(),
              help=_TORCH_SPYRE_HELP + " Here it makes the tree importable so that its targets resolve.")
@_user_errors
def targets(profile: str, probe_specs: tuple[str, ...], probes_file: str | None, as_json: bool,
            torch_spyre: str | None) -> int:
    """Resolve every target of a profile (and of user probes) on the installed build.

    Runs no compile. It may import the target modules. For each target: resolved
    or not, its file and line, its signature, and whether the arguments its probe
    reads are still in that signature. Use it after upgrading torch (or
    torch-spyre) to see which hooks drifted before a trace comes back empty.
    """
    from prov_trace.api import user_hooks
    from prov_trace.probes import profiles as _profiles
    from prov_trace.tracer import drift

    extra_hooks = user_hooks(probe_specs, probes_file)
    if torch_spyre is not None:
        from prov_trace.api import activate_spyre, spyre_profile_check

        spyre_profile_check(profile)
        activate_spyre(torch_spyre, log=_say)
    prof, why = _profiles.choose(profile)
    if prof.name == "spyre" and not _profiles.spyre_installed():
        line = (f"profile spyre: torch-spyre is not installed here (no module named torch_spyre), "
                f"so none of its {len(prof.hooks)} targets can be resolved; to check them against a torch-spyre "
                "source tree, pass --torch-spyre DIR (the folder holding torch_spyre/)")
        if as_json:
            _out(json.dumps({"profile": prof.name, "reason": why, "available": False, "problem": line}))
        else:
            _say(line)
        return 1
    version = torchver.installed()
    chosen = prof.hooks_for(version)
    # Hooks written for other torch releases (a range that excludes this one) are not checked: not drift.
    others = [h for h in prof.hooks if h not in chosen]
    results = drift.check(chosen + tuple(extra_hooks))
    for r in results[len(chosen):]:  # the user's own targets: one that does not resolve is not found, not drift
        r["user"] = True
    failed = [r for r in results if not r["ok"]]
    drifted = [r for r in failed if not r.get("user")]
    missing = [r for r in failed if r.get("user")]
    if as_json:
        _out(json.dumps({"profile": prof.name, "reason": why, "available": True, "torch": version,
                         "targets": results, "drifted": [r["target"] for r in failed],
                         "not_found": [r["target"] for r in missing],
                         "other_releases": [{"target": h.target, "stage": h.stage, "torch_range": h.torch}
                                            for h in others]}, indent=2))
    else:
        _out(f"profile {prof.name}: {why}")
        if others:
            _out(f"torch {version}: {len(others)} of the profile's hooks are for other torch releases and not "
                 "checked: " + ", ".join(f"{h.target} (torch {h.torch})" for h in others))
        for r in results:
            mark = "--   " if r.get("unchecked") else "ok   " if r["ok"] else "MISS " if r.get("user") else "DRIFT"
            ranged = f" (torch {r['torch_range']})" if r.get("torch_range") else ""
            _out(f"  {mark} {r['stage']:<12} {r['event']:<6} {r['target']}{ranged}")
            if r["resolved"]:
                _out(f"        {r['file']}:{r['line']}")
                _out(f"        def {r['target'].rsplit('.', 1)[-1].rsplit(':', 1)[-1]}{r['signature']}")
                if r["reads"]:
                    _out("        reads " + ", ".join(f"{k} {'ok' if v else 'MISSING'}" for k, v in r["reads"].items()))
                for note in r["notes"]:
                    _out(f"        note: {note}")
            if r["reason"]:
                _out(f"        {r['reason']}")
        unchecked = sum(1 for r in results if r.get("unchecked"))
        _out(f"{len(results)} targets: {len(results) - len(failed) - unchecked} ok, {len(drifted)} drifted"
             + (f", {len(missing)} not found (your --probe targets)" if missing else "")
             + (f", {unchecked} not checkable here (the script's own)" if unchecked else ""))
    if failed:
        if not as_json:
            for title, rs in (("drifted:", drifted), ("not found (check the module and name):", missing)):
                if rs:
                    click.echo(title, err=True)
                for r in rs:
                    click.echo(f"  {r['target']} ({r['stage']}, {r['event']}): {r['reason']}", err=True)
        return 1
    return EXIT_OK


def main() -> None:
    cli(prog_name="prov-trace")


if __name__ == "__main__":
    main()
