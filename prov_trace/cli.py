"""The `prov-trace` command line.

Exit status (also in `prov-trace --help` and the README):
  0  success
  1  for `run` of a script: the script's own status (1 for an uncaught exception)
  2  bad input: a usage error, a file that is not a trace, an output that cannot be written
  130  interrupted (Ctrl-C)
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
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def build_report(trace_path: str) -> dict[str, Any]:
    from prov_trace.report.model import build
    from prov_trace.report.reader import read_trace

    return build(read_trace(trace_path))


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
              help="Where to write the Markdown report.")
@click.option("--no-report", is_flag=True, help="Write only the trace; build the report later with `prov-trace report`.")
@click.option("--profile", default="auto", show_default=True,
              help="Which pipeline's hooks to watch: auto, inductor-cpu, inductor-triton.")
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
        no_report: bool, profile: str, backend: str, input_shape: str | None, dtype: str, device: str,
        eval_mode: bool, keep_caches: bool) -> None:
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

    _check_writable(output, "trace")
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
        prof, why = _profiles.choose(profile, device=device)
    except KeyError as exc:
        raise _fail(exc.args[0]) from None
    _say(f"profile {prof.name}: {why}")
    try:
        writer = TraceWriter(output)
    except StreamError as exc:
        raise _fail(str(exc)) from None
    argv = ["prov-trace", "run", *([f"-m {module_name}"] if module_name else []), *([target] if target and not module_name else []), *args]
    session = TraceSession(writer, prof, backend=backend, argv=argv, log=_say,
                           header_extra={"target": target if not module_name else f"-m {module_name}", "target_kind": kind,
                                         "train": not eval_mode})
    try:
        session.start()
    except BackendUnavailable as exc:
        writer.close()
        raise _fail(str(exc)) from None

    exit_code = EXIT_OK
    try:
        if kind == "model":
            try:
                runner.run_model(model, inputs, train=not eval_mode)
            except KeyboardInterrupt:
                session.stop("interrupted", "KeyboardInterrupt")
                exit_code = EXIT_INTERRUPTED
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
    finally:
        if session.ended is None:
            session.stop("exception", "prov-trace stopped unexpectedly")

    if writer.failure:
        _say(f"warning: {writer.failure}; the trace holds what was written before that")
    _say(f"trace written to {output} ({writer.records_written} records, {writer.bytes_written} bytes)")
    if not no_report:
        _finish_report(output, report_path)
    sys.stdout.flush()
    raise click.exceptions.Exit(exit_code)


def _finish_report(trace_path: str, report_path: str) -> None:
    from prov_trace.report import markdown
    from prov_trace.report.reader import TraceReadError

    try:
        model = build_report(trace_path)
    except TraceReadError as exc:
        _say(f"no report: {exc}")
        return
    try:
        write_atomic(report_path, markdown.render(model))
    except OSError as exc:
        _say(f"could not write the report to {report_path}: {exc.strerror or exc}")
    else:
        _say(f"report written to {report_path}")
    click.echo("\n".join(markdown.summary_lines(model)))


@cli.command(epilog=_EXIT_HELP)
@click.argument("trace", metavar="TRACE")
@click.option("-o", "--output", default=DEFAULT_REPORT, show_default=True, metavar="FILE",
              help="Where to write the report; `-` writes to stdout.")
def report(trace: str, output: str) -> None:
    """Rebuild the report from a trace stream, without importing torch.

    A trace cut short (a crash, a kill) is read up to its last whole record,
    and the report opens with a banner saying it is partial.
    """
    from prov_trace.report import markdown
    from prov_trace.report.reader import TraceReadError

    if output != "-":
        _check_writable(output, "report")
        if os.path.exists(trace) and _same_file(output, trace):
            raise _fail(f"the report would overwrite the trace it reads ({trace}): give another -o path")
    try:
        model = build_report(trace)
    except TraceReadError as exc:
        raise _fail(str(exc)) from None
    text = markdown.render(model)
    if output == "-":
        click.echo(text, nl=False)
    else:
        write_atomic(output, text)
        _say(f"report written to {output}")
    if model["trace"]["problem"]:
        _say(f"the trace is partial: {model['trace']['problem']}")


def main() -> None:
    cli(prog_name="prov-trace")


if __name__ == "__main__":
    main()
