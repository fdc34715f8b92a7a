"""The `prov-trace` command line.

Exit status (also in `prov-trace --help` and the README):
  0  success
  1  for `run` of a script: the script's own status (1 for an uncaught exception)
  2  bad input: a usage error, a file that is not a trace, an output that cannot be written
  130  interrupted (Ctrl-C)
  143  stopped by SIGTERM (the trace gets its end record and the report is written first)
A traced script's own exit status always wins for `run PROGRAM`.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

import click

from prov_trace import __version__

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130

DEFAULT_TRACE = "prov-trace.msgpack"
DEFAULT_REPORT = "provenance_audit.md"

_EXIT_HELP = """\b
Exit status:
  0    success
  1    `run PROGRAM`: the program's own status (1 for an uncaught exception)
  2    bad input: usage error, unreadable trace, unwritable output
  130  interrupted (Ctrl-C)
  143  stopped by SIGTERM (trace and report are finished first)
"""


def _say(msg: str) -> None:
    click.echo(f"prov-trace: {msg}", err=True)


def _fail(msg: str, code: int = EXIT_BAD_INPUT) -> "click.exceptions.Exit":
    click.echo(f"prov-trace: error: {msg}", err=True)
    return click.exceptions.Exit(code)


def _check_writable(path: str, what: str) -> None:
    """Say before anything runs if an output can't be written."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise _fail(f"the {what} path {path} is a directory: give a file name")
    if not os.path.isdir(directory):
        raise _fail(f"cannot write the {what} to {path}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise _fail(f"cannot write the {what} to {path}: the directory {directory} is not writable")


def write_atomic(path: str, text: str) -> None:
    """Replace `path` with `text` in one step: write a temp file beside it, then rename."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".prov-trace-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        # mkstemp makes the file 0600; give it the mode a plain open() would (0666 less the umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _write_output(path: str, text: str, what: str) -> None:
    """write_atomic, with a failure (a full disk, a read-only directory) as one sentence and exit 2."""
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise _fail(f"could not write the {what} to {path}: {exc.strerror or exc}; "
                    f"{'the file there is unchanged' if os.path.exists(path) else 'nothing was written'}") from None


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def build_report(trace_path: str) -> dict[str, Any]:
    from prov_trace.report.model import build
    from prov_trace.report.reader import read_trace

    return build(read_trace(trace_path))


FORMATS = ("auto", "md", "html", "json")
_FORMAT_HELP = "Report format: md, html (one self-contained file), json. `auto` takes it from the output's suffix (.html, .json), else md."


def output_format(path: str | None, fmt: str) -> str:
    """The format to write: the one asked for, else the one the output path's suffix names, else Markdown."""
    if fmt != "auto":
        return fmt
    suffix = os.path.splitext(path or "")[1].lower()
    return {".html": "html", ".htm": "html", ".json": "json"}.get(suffix, "md")


def render_report(model: dict[str, Any], fmt: str) -> str:
    if fmt == "html":
        from prov_trace.report import html

        return html.render(model)
    if fmt == "json":
        from prov_trace.report import jsonout

        return jsonout.render(model)
    from prov_trace.report import markdown

    return markdown.render(model)


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=_EXIT_HELP)
@click.version_option(__version__, prog_name="prov-trace")
def cli() -> None:
    """Trace where source provenance survives, and where it is dropped, through torch.compile.

    \b
    prov-trace run examples/reference_mlp.py:SimpleMLP   audit a model
    prov-trace run train.py --steps 3                    trace an existing compile script
    prov-trace report prov-trace.msgpack -o audit.md     rebuild the report from a trace

    Nothing is monkey-patched: the tracer watches only the compile pipeline's
    own functions (sys.monitoring on Python 3.12+), reads their arguments and
    results into plain data, and streams them to a msgpack file.
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


@cli.command(cls=_RunCommand, context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
             epilog=_EXIT_HELP)
@click.argument("target", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("-m", "module_name", metavar="MODULE", help="Run a module as a script, like `python -m MODULE ARGS...`.")
@click.option("-o", "--output", default=DEFAULT_TRACE, show_default=True, metavar="TRACE",
              help="Where to write the trace stream (msgpack).")
@click.option("--report", "report_path", default=DEFAULT_REPORT, show_default=True, metavar="FILE",
              help="Where to write the report (with --format html or json the default suffix follows the format).")
@click.option("--format", "report_format", type=click.Choice(FORMATS), default="auto", show_default=True, help=_FORMAT_HELP)
@click.option("--no-report", is_flag=True, help="Write only the trace; build the report later with `prov-trace report`.")
@click.option("--profile", default="auto", show_default=True,
              help="Which pipeline's hooks to watch: auto, inductor-cpu, inductor-triton, spyre. `auto` picks by the "
                   "model's device (spyre, cuda, else cpu), or for a script by the machine, and says why.")
@click.option("--probe", "probe_specs", multiple=True, metavar="TARGET",
              help="Also watch a function of your own: 'pkg.mod:Qual.name[@entry|@return|@both][=STAGE]' "
                   "(repeatable). Its snapshots become the report column STAGE. See docs/probes.md.")
@click.option("--probes", "probes_file", metavar="FILE.toml",
              help="Probes from a TOML file of [[probe]] tables (target, event, stage). See docs/probes.md.")
@click.option("--backend", default="auto", show_default=True,
              help="Event backend: auto, monitoring (3.12+), inject (3.11-3.13: a probe call compiled into each target's "
                   "bytecode), settrace (any Python, slowest). `auto` takes the best available and says why.")
@click.option("--input-shape", metavar="SHAPE", help="Model input shape, e.g. 2,128 (model targets only).")
@click.option("--dtype", default="float32", show_default=True, help="Input dtype for --input-shape.")
@click.option("--device", default="cpu", show_default=True, help="Device for the model and its inputs.")
@click.option("--eval/--train", "eval_mode", default=True, show_default=True,
              help="--eval runs one forward under torch.no_grad() (one inference graph); "
                   "--train also runs backward (forward and backward graphs).")
@click.option("--keep-caches", is_flag=True,
              help="Leave Inductor's caches on. By default they are defeated: a cache hit skips lowering and "
                   "codegen, and stages after post-grad would never fire.")
def run(target: str | None, args: tuple[str, ...], module_name: str | None, output: str, report_path: str,
        report_format: str, no_report: bool, profile: str, probe_specs: tuple[str, ...], probes_file: str | None, backend: str,
        input_shape: str | None, dtype: str, device: str, eval_mode: bool, keep_caches: bool) -> None:
    """Trace one compile: a model target, a script, or a module.

    \b
    TARGET is one of:
      path/to/file.py:Attr   a model: Attr is an nn.Module subclass (built with no
      package.module:Attr    arguments) or a zero-argument function returning a module.
                             It is compiled once on the CPU with caches defeated and run once.
      path/to/script.py      a script, run unmodified the way `python` runs it, with ARGS;
                             every compile it makes is traced.
    Use -m MODULE ARGS... to run a module like `python -m`.

    \b
    Model inputs come from, in order: --input-shape (with --dtype, --device);
    a module-level example_inputs() in the target's file; the first layer with
    parameters (nn.Linear(in_features) gives (2, in_features)).

    Writes the trace (-o) and the Markdown report (--report), then prints a
    per-stage summary: which hooks resolved and fired, and how many objects
    each stage produced.
    """
    from prov_trace import runner

    if module_name:
        if target is not None:
            args = (target, *args)
        kind = "module"
    elif target is None:
        raise _fail("nothing to run: give a model (file.py:Class), a script (file.py), or -m MODULE; see --help")
    elif runner.ModelTarget.parse(target) is not None and not os.path.isfile(target):
        kind = "model"
        if args:
            raise _fail(f"a model target takes no arguments, but got: {' '.join(args)}")
    elif target.endswith(".py") or os.path.isfile(target):
        kind = "script"
    else:
        raise _fail(f"'{target}' is neither a model target (file.py:Class or module:Class) nor a Python script")

    extra_hooks = _user_hooks(probe_specs, probes_file)
    _check_writable(output, "trace")
    if report_path == DEFAULT_REPORT and report_format in ("html", "json"):
        report_path = os.path.splitext(DEFAULT_REPORT)[0] + "." + report_format
    report_format = output_format(report_path, report_format)
    if not no_report:
        _check_writable(report_path, "report")
        if _same_file(report_path, output):
            raise _fail(f"the report and the trace are the same file ({output}): give them different paths")
    if not keep_caches:
        runner.defeat_caches()

    model = inputs = None
    if kind == "model":
        mt = runner.ModelTarget.parse(target)
        try:
            module = runner.load_module(mt.module)
            import torch

            model = runner.build_model(module, mt.attr).to(device)
            inputs, origin = runner.example_inputs(model, module, input_shape, dtype, device)
        except runner.UsageError as exc:
            raise _fail(str(exc)) from None
        _say(f"inputs from {origin}: " + ", ".join(f"{tuple(i.shape)} {i.dtype}" for i in inputs if isinstance(i, torch.Tensor)))
    elif kind == "script" and not os.path.isfile(target):
        raise _fail(f"there is no file {target}: give the path to a Python script")
    elif kind == "module" and not runner.module_exists(module_name):
        raise _fail(f"no module named {module_name}: check the name, or run from the directory that holds it")

    from prov_trace.probes import profiles as _profiles
    from prov_trace.tracer.backends import BackendUnavailable
    from prov_trace.tracer.session import TraceSession
    from prov_trace.tracer.stream import StreamError, TraceWriter

    try:
        prof, why = _profiles.choose(profile, device=_model_device(model, device) if kind == "model" else None)
    except KeyError as exc:
        raise _fail(exc.args[0]) from None
    _say(f"profile {prof.name}: {why}")
    try:
        writer = TraceWriter(output)
    except StreamError as exc:
        raise _fail(str(exc)) from None
    argv = ["prov-trace", "run", *([f"-m {module_name}"] if module_name else []), *([target] if target and not module_name else []), *args]
    session = TraceSession(writer, prof, backend=backend, argv=argv, log=_say, extra_hooks=extra_hooks,
                           header_extra={"target": target if not module_name else f"-m {module_name}", "target_kind": kind,
                                         "train": not eval_mode})
    try:
        session.start()
    except BackendUnavailable as exc:
        writer.close()
        raise _fail(str(exc)) from None

    exit_code = EXIT_OK
    sigterm = _SigtermStop(session)
    sigterm.install()
    try:
        if kind == "model":
            try:
                runner.run_model(model, inputs, train=not eval_mode)
            except KeyboardInterrupt:
                session.stop("interrupted", "KeyboardInterrupt")
                exit_code = EXIT_INTERRUPTED
            except runner.Terminated as exc:
                session.stop("signal", exc.name)
                exit_code = exc.exit_code
            except BaseException as exc:  # the model's own failure: report it, keep the trace
                import traceback

                traceback.print_exc()
                session.stop("exception", f"{type(exc).__name__}: {exc}")
                exit_code = 1
            else:
                session.stop("ok")
        else:
            result = runner.run_program(module_name or target, list(args), as_module=kind == "module")
            session.stop(result.outcome, result.detail)
            exit_code = result.exit_code
    except runner.Terminated as exc:  # in the instant between the program's end and the session's stop
        if session.ended is None:
            session.stop("signal", exc.name)
        exit_code = exc.exit_code
    finally:
        if session.ended is None:
            session.stop("exception", "prov-trace stopped unexpectedly")

    try:
        if session.ended and session.ended.get("outcome") == "signal":
            _say(f"stopped by {session.ended.get('detail')}: the trace and report hold what ran before it")
        if writer.failure:
            _say(f"warning: {writer.failure}; the trace holds what was written before that")
        _say(f"trace written to {output} ({writer.records_written} records, {writer.bytes_written} bytes)")
        if not no_report:
            _finish_report(output, report_path, report_format)
        sys.stdout.flush()
    finally:
        sigterm.restore()
    if sigterm.late is not None:  # a SIGTERM while the trace and report were being finished
        exit_code = 128 + sigterm.late
    raise click.exceptions.Exit(exit_code)


class _SigtermStop:
    """SIGTERM while the traced program runs: a clean stop, like Ctrl-C.

    The handler raises ``runner.Terminated`` in the main thread, which unwinds the
    program; the trace gets an end record (outcome ``signal``), the report is
    written, and `run` exits 128 + 15. It is installed only where SIGTERM has its
    default action (a program started with SIGTERM ignored keeps ignoring it), and
    the previous handler is put back when `run` ends. A SIGTERM that comes after
    the program ended is remembered: the trace and report are finished first.
    """

    def __init__(self, session: Any):
        self.session = session
        self.previous: Any = None
        self.late: int | None = None

    def install(self) -> None:
        import signal

        try:
            previous = signal.getsignal(signal.SIGTERM)
            if previous != signal.SIG_DFL:
                return
            signal.signal(signal.SIGTERM, self._handle)
            self.previous = previous
        except (ValueError, OSError, AttributeError):  # not the main thread, or no SIGTERM on this platform
            self.previous = None

    def _handle(self, signum: int, frame: Any) -> None:
        from prov_trace.runner import Terminated

        if self.session.ended is None and getattr(self.session, "_active", False):
            raise Terminated(signum)
        if self.late is None:
            self.late = signum

    def restore(self) -> None:
        import signal

        if self.previous is not None:
            try:
                signal.signal(signal.SIGTERM, self.previous)
            except (ValueError, OSError):
                pass
            self.previous = None


def _user_hooks(probe_specs: tuple[str, ...], probes_file: str | None) -> tuple:
    """The hooks of --probe and --probes; a wrong one is bad input (exit 2) before anything runs."""
    from prov_trace.probes import user

    try:
        probes = [user.parse_spec(t) for t in probe_specs]
        if probes_file:
            probes += user.load_file(probes_file)
        return user.hooks_for(probes)
    except user.ProbeSpecError as exc:
        raise _fail(str(exc)) from None


def _model_device(model: Any, default: str) -> str:
    """The device type the model's parameters (else buffers) live on."""
    for tensors in (model.parameters(), model.buffers()):
        for t in tensors:
            return t.device.type
    return default.split(":")[0]


def _finish_report(trace_path: str, report_path: str, fmt: str = "md") -> None:
    from prov_trace.report import markdown
    from prov_trace.report.reader import TraceReadError

    try:
        model = build_report(trace_path)
    except TraceReadError as exc:
        _say(f"no report: {exc}")
        return
    try:
        write_atomic(report_path, render_report(model, fmt))
    except OSError as exc:
        _say(f"could not write the report to {report_path}: {exc.strerror or exc}")
    else:
        _say(f"report written to {report_path}")
    click.echo("\n".join(markdown.summary_lines(model)))


@cli.command(epilog=_EXIT_HELP)
@click.argument("trace", metavar="TRACE")
@click.option("-o", "--output", default=DEFAULT_REPORT, show_default=True, metavar="FILE",
              help="Where to write the report; `-` writes to stdout. A .html or .json suffix sets the format.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True, help=_FORMAT_HELP)
def report(trace: str, output: str, fmt: str) -> None:
    """Rebuild the report from a trace stream, without importing torch.

    \b
    Formats (docs/report.md):
      md    Markdown: tables and a Mermaid lineage chart that GitHub renders
      html  one self-contained file (no network): a coloured matrix whose
            cells list their objects, a drawn lineage graph, clickable lines
      json  the report model, shaped as docs/report.schema.json says

    A trace cut short (a crash, a kill) is read up to its last whole record,
    and the report opens with a banner saying it is partial.
    """
    from prov_trace.report.reader import TraceReadError

    if output == DEFAULT_REPORT and fmt in ("html", "json"):
        output = os.path.splitext(DEFAULT_REPORT)[0] + "." + fmt
    fmt = output_format(output, fmt)
    if output != "-":
        _check_writable(output, "report")
        if os.path.exists(trace) and _same_file(output, trace):
            raise _fail(f"the report would overwrite the trace it reads ({trace}): give another -o path")
    try:
        model = build_report(trace)
    except TraceReadError as exc:
        raise _fail(str(exc)) from None
    text = render_report(model, fmt)
    if output == "-":
        click.echo(text, nl=False)
    else:
        _write_output(output, text, "report")
        _say(f"report written to {output}")
    if model["trace"]["problem"]:
        _say(f"the trace is partial: {model['trace']['problem']}")


_DIFF_EXIT_HELP = """\b
Exit status:
  0    compared (with --fail-on-regression: and no field's population dropped)
  1    --fail-on-regression: a field's population dropped at some stage
  2    bad input: usage error, a file that is not a trace, an unwritable output
"""


@cli.command(epilog=_DIFF_EXIT_HELP)
@click.argument("trace_a", metavar="A")
@click.argument("trace_b", metavar="B")
@click.option("-o", "--output", default="-", show_default=True, metavar="FILE",
              help="Where to write the diff; `-` prints it. A .html, .json or .md suffix sets the format.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
              help="md, html or json; `auto` takes it from the output's suffix, else md.")
@click.option("--fail-on-regression", is_flag=True,
              help="Exit 1 when any field's population dropped at any stage from A to B.")
def diff(trace_a: str, trace_b: str, output: str, fmt: str, fail_on_regression: bool) -> None:
    """Compare two traces A (before) and B (after).

    \b
    For each graph (matched by compile id and kind) it lists:
      - per stage and field, population changes (✅ 3/3 → ◐ 1/3), marked
        dropped or rose;
      - objects (FX nodes, IR ops, kernels) added or removed at each stage,
        and lineage edges added or removed;
      - source lines whose provenance now ends at an earlier (or later) stage.
    A field's population dropped when B populates a smaller fraction of a
    stage's objects than A did, or B did not measure that stage at all.
    """
    from prov_trace.report import diff as _diff
    from prov_trace.report.reader import TraceReadError

    fmt = output_format(output, fmt)
    if output != "-":
        _check_writable(output, "diff")
        for t in (trace_a, trace_b):
            if os.path.exists(t) and _same_file(output, t):
                raise _fail(f"the diff would overwrite the trace it reads ({t}): give another -o path")
    try:
        a = build_report(trace_a)
        b = build_report(trace_b)
    except TraceReadError as exc:
        raise _fail(str(exc)) from None
    d = _diff.diff(a, b)
    text = {"md": _diff.render_markdown, "html": _diff.render_html, "json": _diff.render_json}[fmt](d)
    if output == "-":
        click.echo(text, nl=False)
    else:
        _write_output(output, text, "diff")
        _say(f"diff written to {output}")
    for which, m in (("A", a), ("B", b)):
        if m["trace"]["problem"]:
            _say(f"trace {which} is partial: {m['trace']['problem']}")
    if fail_on_regression and d["regressions"]:
        _say(f"{len(d['regressions'])} field population drop(s): " + "; ".join(
            f"{r['field']} at {r['stage']} in graph {r['graph']}" for r in d["regressions"][:5]))
        raise click.exceptions.Exit(1)
    raise click.exceptions.Exit(EXIT_OK)


_CHECK_EXIT_HELP = """\b
Exit status:
  0    every rule holds
  1    some rule fails (each failure is listed)
  2    bad input: a rule that cannot be read or names no stage or field,
       a file that is not a trace
"""


@cli.command(epilog=_CHECK_EXIT_HELP)
@click.argument("trace", metavar="TRACE")
@click.option("--require", "rules", multiple=True, required=True, metavar="RULE",
              help="A rule STAGE:FIELD=LEVEL or STAGE:FIELD>=FRACTION (repeatable), e.g. kernel_spec:origins=all, "
                   "post_grad:stack_trace>=0.5, '*:stack_trace>=50%'.")
@click.option("--graph", "graphs", multiple=True, metavar="LABEL",
              help="Check only this graph, e.g. '0/0 inference' (repeatable). Default: every graph.")
def check(trace: str, rules: tuple[str, ...], graphs: tuple[str, ...]) -> None:
    """Gate CI on provenance: check rules over a trace's Stage × Field matrix.

    \b
    RULE := STAGE ":" FIELD OP LEVEL          (grammar: docs/check.md)
      STAGE  source, pre_grad, post_grad, ir_pre, ir_post, kernel_spec,
             artifact, a user probe's stage, or * (each stage measuring FIELD)
      FIELD  a field of the matrix: stack_trace, nn_module_stack, origins, ...
      OP     = (== too) with LEVEL all | any | none
             = == >= > <= < with a fraction 0..1 or a percentage (50%)
    A rule holds when it holds in every graph. A stage that did not fire fails.

    \b
    Examples:
      prov-trace check t.msgpack --require kernel_spec:origins=all
      prov-trace check t.msgpack --require post_grad:stack_trace>=0.5 --require ir_post:traceback=any
    """
    from prov_trace.report import check as _check
    from prov_trace.report.reader import TraceReadError

    try:
        parsed = [_check.parse_rule(r) for r in rules]
    except _check.RuleError as exc:
        raise _fail(str(exc)) from None
    try:
        model = build_report(trace)
    except TraceReadError as exc:
        raise _fail(str(exc)) from None
    try:
        results = _check.check(model, parsed, list(graphs) or None)
    except _check.RuleError as exc:
        raise _fail(str(exc)) from None
    click.echo(_check.render(results, model["stage_titles"]), nl=False)
    if model["trace"]["problem"]:
        _say(f"the trace is partial: {model['trace']['problem']}")
    raise click.exceptions.Exit(EXIT_OK if all(r["holds"] for r in results) else 1)


_TARGETS_EXIT_HELP = """\b
Exit status:
  0    every target resolves and its signature has the arguments the probe reads
  1    some target drifted (listed), or the profile's package is not installed here
  2    bad input: usage error, a wrong --probe or --probes file
"""


@cli.command(epilog=_TARGETS_EXIT_HELP)
@click.option("--profile", default="auto", show_default=True,
              help="The profile to check: auto, inductor-cpu, inductor-triton, spyre. `auto` picks by this machine.")
@click.option("--probe", "probe_specs", multiple=True, metavar="TARGET",
              help="Also check a user probe, 'pkg.mod:Qual.name[@entry|@return|@both][=STAGE]' (repeatable).")
@click.option("--probes", "probes_file", metavar="FILE.toml", help="Also check the probes in a TOML file.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def targets(profile: str, probe_specs: tuple[str, ...], probes_file: str | None, as_json: bool) -> None:
    """Resolve every target of a profile (and of user probes) on the installed build.

    Runs no compile. It may import the target modules. For each target: resolved
    or not, its file and line, its signature, and whether the arguments its probe
    reads are still in that signature. Use it after upgrading torch (or
    torch-spyre) to see which hooks drifted before a trace comes back empty.
    """
    import json

    from prov_trace.probes import profiles as _profiles
    from prov_trace.tracer import drift

    extra_hooks = _user_hooks(probe_specs, probes_file)
    try:
        prof, why = _profiles.choose(profile)
    except KeyError as exc:
        raise _fail(exc.args[0]) from None
    if prof.name == "spyre" and not _profiles.spyre_installed():
        line = (f"profile spyre: torch-spyre is not installed here (no module named torch_spyre), "
                f"so none of its {len(prof.hooks)} targets can be resolved")
        if as_json:
            click.echo(json.dumps({"profile": prof.name, "reason": why, "available": False, "problem": line}))
        else:
            click.echo(f"prov-trace: {line}", err=True)
        raise click.exceptions.Exit(1)
    results = drift.check(tuple(prof.hooks) + tuple(extra_hooks))
    drifted = [r for r in results if not r["ok"]]
    if as_json:
        click.echo(json.dumps({"profile": prof.name, "reason": why, "available": True, "targets": results,
                               "drifted": [r["target"] for r in drifted]}, indent=2))
    else:
        click.echo(f"profile {prof.name}: {why}")
        for r in results:
            mark = "ok   " if r["ok"] else "DRIFT"
            click.echo(f"  {mark} {r['stage']:<12} {r['event']:<6} {r['target']}")
            if r["resolved"]:
                click.echo(f"        {r['file']}:{r['line']}")
                click.echo(f"        def {r['target'].rsplit('.', 1)[-1].rsplit(':', 1)[-1]}{r['signature']}")
                if r["reads"]:
                    click.echo("        reads " + ", ".join(f"{k} {'ok' if v else 'MISSING'}" for k, v in r["reads"].items()))
                for note in r["notes"]:
                    click.echo(f"        note: {note}")
            if r["reason"]:
                click.echo(f"        {r['reason']}")
        click.echo(f"{len(results)} targets: {len(results) - len(drifted)} ok, {len(drifted)} drifted")
    if drifted:
        if not as_json:
            click.echo("drifted:", err=True)
            for r in drifted:
                click.echo(f"  {r['target']} ({r['stage']}, {r['event']}): {r['reason']}", err=True)
        raise click.exceptions.Exit(1)
    raise click.exceptions.Exit(EXIT_OK)


def main() -> None:
    cli(prog_name="prov-trace")


if __name__ == "__main__":
    main()
