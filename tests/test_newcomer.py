"""A newcomer's first hour (issue 18): each stumble, tried as a user would, now gets a sentence that helps."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import cli

LIGHT = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}


def _errors(proc) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("prov-trace: error:")]


@pytest.fixture(scope="module")
def nothing_run(tmp_path_factory):
    """A script that compiles nothing: its trace holds no graph."""
    d = tmp_path_factory.mktemp("nothing")
    (d / "nothing.py").write_text("print('no compile here')\n")
    (d / "r.md").write_text("the report of an earlier run that compiled\n")
    proc = cli("run", "-o", str(d / "t.msgpack"), "--report", str(d / "r.md"), str(d / "nothing.py"), cwd=d)
    return d, proc


def test_diff_counts_a_lost_graph_as_a_regression(mlp_run, nothing_run, tmp_path):
    d, _ = nothing_run
    proc = cli("diff", str(mlp_run.trace), str(d / "t.msgpack"), "--fail-on-regression", "-o", str(tmp_path / "d.md"))
    assert proc.returncode == 1, proc.stderr
    assert "graph 0/0 inference is missing from B" in proc.stderr
    text = (tmp_path / "d.md").read_text()
    assert "1 graph(s) of A missing from B" in text and "▼ lost" in text
    # The same two traces the other way round: B gained a graph, nothing regressed.
    back = cli("diff", str(d / "t.msgpack"), str(mlp_run.trace), "--fail-on-regression")
    assert back.returncode == 0, back.stderr


def test_a_run_that_compiled_nothing_keeps_the_existing_report_and_says_so(nothing_run):
    d, proc = nothing_run
    assert proc.returncode == 0, proc.stderr
    assert (d / "r.md").read_text() == "the report of an earlier run that compiled\n"
    assert "the program compiled nothing (the trace holds no graph), so the existing report" in proc.stderr
    assert "was kept" in proc.stderr


def test_the_summary_of_a_run_that_compiled_nothing_is_one_line(nothing_run):
    """A program that never imports torch's compile pipeline: the summary listed every stage NOT REACHED with a
    "module ... was never imported" line per hook (16 lines), where one sentence says what happened."""
    _, proc = nothing_run
    summary = proc.stdout.split("prov-trace summary:\n", 1)[1].splitlines()
    assert summary == ["  no stage reached: the program never imported a module the inductor-cpu profile watches "
                       "(torch._dynamo.convert_frame, torch.export._trace, torch._inductor.fx_passes.pre_grad, ...), "
                       "so it made no compile or export"], proc.stdout


def test_a_script_with_a_syntax_error_prints_it_as_python_does(tmp_path):
    """python prints a script's syntax error with no traceback; prov-trace printed "Traceback" and its own
    runner.py frame (the compile() call) above it."""
    (tmp_path / "syn.py").write_text("import torch\ndef f(:\n    pass\n")
    plain = subprocess.run([sys.executable, "syn.py"], cwd=tmp_path, capture_output=True, text=True)
    proc = cli("run", "-o", "t.msgpack", "--no-report", "syn.py", cwd=tmp_path)
    assert proc.returncode == plain.returncode == 1, proc.stderr
    ours = "".join(ln + "\n" for ln in proc.stderr.splitlines() if not ln.startswith("prov-trace:"))
    assert ours == plain.stderr and "Traceback" not in ours, proc.stderr


def test_the_report_of_a_run_that_compiled_nothing_says_so(nothing_run):
    """Its Counts section was a table header with no rows; `check` said "nothing was compiled", the report did not."""
    d, _ = nothing_run
    proc = cli("report", str(d / "t.msgpack"), "-o", "-")
    assert proc.returncode == 0, proc.stderr
    counts = proc.stdout.split("## Counts", 1)[1].split("\n## ", 1)[0]
    assert "Nothing was compiled: the trace holds no graph" in counts and "| Graph |" not in counts
    # The Hooks table names each stage by its title, also a stage the trace has no column for.
    hooks = proc.stdout.split("## Hooks", 1)[1]
    assert "| Dynamo graph |" in hooks and "| AOT graph |" in hooks and "dynamo_graph" not in hooks, hooks
    html = cli("report", str(d / "t.msgpack"), "--format", "html", "-o", "-").stdout
    assert "Nothing was compiled: the trace holds no graph" in html


def test_an_explicit_format_against_the_suffix_is_written_and_said(nothing_run, tmp_path):
    """`--format md -o r.html` writes Markdown, as asked; it did so silently."""
    d, _ = nothing_run
    proc = cli("report", str(d / "t.msgpack"), "--format", "md", "-o", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr
    assert f"writing Markdown to {tmp_path / 'r.html'}, as --format md asks, though its suffix names HTML" in proc.stderr
    assert (tmp_path / "r.html").read_text().startswith("# Source-to-kernel provenance audit")
    agree = cli("report", str(d / "t.msgpack"), "--format", "html", "-o", str(tmp_path / "r2.html"))
    assert agree.returncode == 0 and "suffix names" not in agree.stderr
    ran = cli("run", "--format", "json", "--report", str(tmp_path / "r.md"), "-o", str(tmp_path / "t.msgpack"),
              str(d / "nothing.py"), cwd=tmp_path)
    assert ran.returncode == 0 and "writing JSON to" in ran.stderr and "though its suffix names Markdown" in ran.stderr
    diffed = cli("diff", str(d / "t.msgpack"), str(d / "t.msgpack"), "--format", "html", "-o", str(tmp_path / "d.json"))
    assert diffed.returncode == 0 and "writing HTML to" in diffed.stderr


ARGPARSE_AFTER_COMPILE = textwrap.dedent("""
    import argparse
    import torch

    @torch.compile
    def step(x):
        return torch.relu(x) * 2

    with torch.no_grad():
        step(torch.ones(4))
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1)
    print(parser.parse_args())
""")


def test_prov_trace_options_after_a_failing_script_get_a_hint(tmp_path):
    (tmp_path / "train.py").write_text(ARGPARSE_AFTER_COMPILE)
    proc = cli("run", "--report", str(tmp_path / "r.md"), str(tmp_path / "train.py"), "-o", "out.msgpack",
               cwd=tmp_path, env=LIGHT)
    assert proc.returncode == 2, proc.stderr  # argparse's own status: the script got -o
    assert "error: unrecognized arguments: -o out.msgpack" in proc.stderr
    hint = [ln for ln in proc.stderr.splitlines() if "prov-trace options go before the program" in ln]
    assert len(hint) == 1 and "-o came after it, so the program got it;" in hint[0], proc.stderr
    assert f"write `prov-trace run -o out.msgpack ... {tmp_path / 'train.py'}`" in hint[0], proc.stderr
    # The compile before the failure was traced and reported as usual.
    assert (tmp_path / "r.md").exists() and (tmp_path / "prov-trace.msgpack").exists()


TWO_INPUTS = textwrap.dedent("""
    import torch
    from torch import nn

    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x, y):
            return self.fc(x) + y
""")


def test_a_forward_with_two_inputs_is_checked_before_compiling(tmp_path):
    (tmp_path / "two.py").write_text(TWO_INPUTS)
    proc = cli("run", f"{tmp_path / 'two.py'}:TwoInputs", "-o", str(tmp_path / "t.msgpack"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    (err,) = _errors(proc)
    assert "TwoInputs.forward takes 2 inputs (x, y), but first layer Linear(in_features=8) gives 1" in err
    assert "define example_inputs()" in err and "returning a tuple of 2" in err
    assert "Traceback" not in proc.stderr and not (tmp_path / "t.msgpack").exists()


SEQUENTIAL = textwrap.dedent("""
    from torch import nn

    def build():
        return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
""")


def test_a_device_torch_cannot_use_and_a_malformed_shape_are_one_sentence(tmp_path):
    (tmp_path / "seq.py").write_text(SEQUENTIAL)
    for args, text in ((["--device", "tpu"], "--device tpu is not a device torch knows"),
                       (["--input-shape", "2,x"], "--input-shape '2,x' is not a shape"),
                       (["--input-shape", "2,,16"], "--input-shape '2,,16' is not a shape")):
        proc = cli("run", "seq.py:build", *args, "-o", str(tmp_path / "t.msgpack"), cwd=tmp_path, env=LIGHT)
        assert proc.returncode == 2, proc.stderr
        (err,) = _errors(proc)
        assert text in err, err
        assert "Traceback" not in proc.stderr and not (tmp_path / "t.msgpack").exists()


def test_inputs_that_do_not_fit_the_model_are_bad_input_not_a_traceback(tmp_path):
    """The compile fails on inputs the model can't take; run uncompiled, it fails too: exit 2 and one
    sentence with the model's own error, not Dynamo's traceback. The trace keeps what ran."""
    (tmp_path / "seq.py").write_text(SEQUENTIAL)
    proc = cli("run", "seq.py:build", "--input-shape", "2,5", "-o", str(tmp_path / "t.msgpack"), cwd=tmp_path, env=LIGHT)
    assert proc.returncode == 2, proc.stderr
    (err,) = _errors(proc)
    assert ("Sequential fails on the inputs from --input-shape 2,5 without compiling too (RuntimeError: mat1 and "
            "mat2 shapes cannot be multiplied (2x5 and 16x32))") in err, err
    # Dynamo's exception is not dumped: the live progress names it in one line, as it happens, with Dynamo's
    # explanation (the line said only "RuntimeError when making fake tensor call").
    said = next(ln for ln in proc.stderr.splitlines() if ln.startswith("prov-trace: [0/0] the compile raised "))
    assert said.startswith("prov-trace: [0/0] the compile raised TorchRuntimeError: RuntimeError when making fake "
                           "tensor call: Dynamo failed to run FX node with fake tensors: call_function"), said
    assert said.endswith("got RuntimeError('a and b must have same reduction dim, but got [2, 5] X [16, 32].')"), said
    assert proc.stderr.count("TorchRuntimeError") == 1, proc.stderr
    # Dynamo's frame conversion was entered (the Source hook's one event) and exited by the exception.
    assert re.search(r"^  Source +NO RESULT +hooks 2/2 resolved, 1 event, 0 objects, 1 call raised \(the compile "
                     r"failed inside it\)$", proc.stdout, re.M), proc.stdout
    # Inductor was never imported: its stages were not reached, which is no hook drifting (NOT RESOLVED).
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("  ") and not ln.startswith("      ")]
    inductor = [ln for ln in lines if ln.split()[0] in ("LoopLevelIR", "Kernel", "Artifact")]
    assert inductor and all(" NOT REACHED " in ln or " DID NOT FIRE " in ln for ln in inductor), lines
    assert not any(" NOT RESOLVED " in ln for ln in lines), lines
    from prov_trace.stream.reader import read_trace

    assert read_trace(tmp_path / "t.msgpack").end["outcome"] == "exception"


def test_a_sequential_model_is_explained_in_the_report(tmp_path):
    (tmp_path / "seq.py").write_text(SEQUENTIAL)
    proc = cli("run", f"{tmp_path / 'seq.py'}:build", "-o", str(tmp_path / "t.msgpack"), "--report",
               str(tmp_path / "r.md"), cwd=tmp_path, env=LIGHT)
    assert proc.returncode == 0, proc.stderr
    import prov_trace

    report = prov_trace.load(tmp_path / "t.msgpack")
    (g,) = report.model["graphs"]
    assert g["stages"]["source"]["objects"] == []
    (note,) = g["notes"]
    frames = g["stages"]["source"]["library"]
    assert frames and all("/torch/" in f for f in frames), frames
    assert f"library code ({frames[0]}" in note, note
    traced = report.matrix(g["label"])["stack_trace"]["pre_grad"]
    assert f"{traced['n']} of {traced['total']} pre-grad nodes carry a stack trace" in note
    import html
    import re

    assert note in html.unescape(re.sub(r"\\(.)", r"\1", report.to_markdown()))
    # No line holds an op, so the two per-line sections say so rather than show an empty table.
    md = report.to_markdown()
    assert "No line of source holds an op in this graph, so there is no line to lose." in md
    survival = md.split("### Provenance survival per source line")[1].split("### Lineage")[0]
    assert "| Line | Code |" not in survival and "No line of your own source holds an op" in survival


def test_check_rules_in_help_are_quoted_and_an_eaten_operator_gets_a_hint(mlp_run):
    helptext = cli("check", "--help").stdout
    assert "--require 'post_grad:stack_trace>=0.5'" in helptext
    assert "post_grad:stack_trace>=0.5 " not in helptext.replace("'post_grad:stack_trace>=0.5'", "")
    # What a shell leaves of an unquoted `--require post_grad:stack_trace>=0.5`.
    proc = cli("check", str(mlp_run.trace), "--require", "post_grad:stack_trace")
    assert proc.returncode == 2
    (err,) = _errors(proc)
    assert "has no operator" in err and "quote the rule" in err and "--require 'post_grad:stack_trace>=0.5'" in err


def test_one_error_style_for_click_and_prov_trace(tmp_path):
    for args, needle in ((["report"], "Missing argument 'TRACE...'"),
                         (["run", "--bogus", "s.py"], "'--bogus' is not an option of prov-trace run"),
                         (["run", "--profile", "tpu", "x.py"], "'tpu' is not one of 'auto', 'inductor-cpu'"),
                         (["report", "--help-me"], "No such option '--help-me'")):
        proc = cli(*args, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        errors = _errors(proc)
        assert len(errors) == 1 and needle in errors[0], (args, proc.stderr)
        assert "Traceback" not in proc.stderr and "Usage:" not in proc.stderr
    assert "Exit status:" in cli("report", "--help").stdout and "143" not in cli("report", "--help").stdout


def test_shell_completion_offers_choices_and_paths(tmp_path):
    (tmp_path / "model_a.py").write_text("")
    env = {**os.environ, "_PROV_TRACE_COMPLETE": "bash_complete", "COMP_WORDS": "prov-trace run --profile ",
           "COMP_CWORD": "3"}
    out = subprocess.run([sys.executable, "-m", "prov_trace"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert [ln.split(",", 1)[1] for ln in out.stdout.splitlines()] == ["auto", "inductor-cpu", "inductor-triton", "spyre"]
    env.update(COMP_WORDS="prov-trace report mod", COMP_CWORD="2")
    out = subprocess.run([sys.executable, "-m", "prov_trace"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.stdout.splitlines() == ["file,mod"]  # paths: bash completes the file itself


def test_torchs_warning_about_the_caches_prov_trace_turned_off_is_not_shown(mlp_run):
    assert "dynamo_pgo force disabled" not in mlp_run.proc.stderr
    # A CUDA build of torch without a GPU (this project's venvs) logs this when it first builds a C++
    # kernel; a model audit leaves it out. The audit did build one: its trace has a C++ artifact.
    assert "No CUDA runtime is found" not in mlp_run.proc.stderr
    assert "Artifact" in mlp_run.proc.stdout and "cpp_fused" in mlp_run.report.read_text()


FULLGRAPH_BREAK = """\
import torch


def f(x):
    y = x.relu()
    print("side effect")
    return y + 1


try:
    torch.compile(f, fullgraph=True)(torch.randn(3))
except Exception as exc:
    print("caught:", type(exc).__name__)
raise SystemExit(3)
"""


def test_a_compile_that_fails_in_dynamo_reads_as_not_reached_not_as_drift(tmp_path):
    """fullgraph=True around a print: Dynamo raises before Inductor is imported. The summary said NOT RESOLVED
    ('module ... was never imported') for every Inductor stage, which reads as prov-trace not matching torch."""
    (tmp_path / "fg.py").write_text(FULLGRAPH_BREAK)
    proc = cli("run", "--report", "r.md", "-o", "t.msgpack", "fg.py", cwd=tmp_path, env=LIGHT)
    # Live, as Dynamo handles it: the one line that says why this frame compiled nothing.
    assert ("prov-trace: [0/0] the compile raised Unsupported: Failed to trace builtin operator: Dynamo does not know "
            "how to trace builtin operator `print` with argument types ['str'] (has_kwargs False)\n") in proc.stderr
    assert proc.returncode == 3 and "caught: Unsupported" in proc.stdout, proc.stdout + proc.stderr
    lines = {ln.split()[0] + (" " + ln.split()[1] if ln.split()[0] in ("FX", "Kernel") else ""): ln
             for ln in proc.stdout.splitlines() if ln.startswith("  ") and not ln.startswith("      ")}
    assert " NO RESULT " in lines["Source"] and lines["Source"].endswith(", 1 call raised (the compile failed inside it)")
    for stage in ("FX post-grad", "LoopLevelIR", "Kernel spec"):
        assert " NOT REACHED " in lines[stage], lines
    assert not any(" NOT RESOLVED " in ln for ln in lines.values()), lines
    # The report told this frame apart from one with no op to capture only by the summary.
    import prov_trace

    frames = prov_trace.load(tmp_path / "t.msgpack").model["frames_without_graph"]
    (stopped,) = [f["stopped_in"] for f in frames if f["qualname"] == "f"]
    error = stopped.pop("error")
    assert stopped == {"stage": "source", "target": "torch._dynamo.convert_frame:_compile"}
    # What Dynamo raised, read where it handled it: the run's reader no longer has to find it in stderr.
    assert error["type"] == "torch._dynamo.exc.Unsupported" and "inner" not in error, error
    assert error["text"].startswith("Failed to trace builtin operator\n") and "`print`" in error["text"], error
    assert ("(its compile stopped inside `_compile`, whose call did not return: it raised Unsupported: Failed to "
            "trace builtin operator: Dynamo does not know how to trace builtin operator \\`print\\`"
            in (tmp_path / "r.md").read_text())
    checked = prov_trace.load(tmp_path / "t.msgpack").check("kernel_spec:origins=all")
    assert checked.failures[0]["why"] == ("the trace holds no graph: nothing was compiled (the compile stopped inside "
                                          "_compile: it raised Unsupported: Failed to trace builtin operator: Dynamo "
                                          "does not know how to trace builtin operator `print` with argument types "
                                          "['str'] (has_kwargs False))"), checked.text


BACKEND_RAISES = """\
import torch


def g(x):
    return torch.tanh(x) * 2


def my_backend(gm, example_inputs):
    raise RuntimeError("my backend cannot do this.")


try:
    torch.compile(g, backend=my_backend)(torch.randn(4))
except Exception as exc:
    print("caught:", type(exc).__name__)
lstm = torch.nn.LSTM(4, 4)


def h(x):  # Dynamo cannot trace an LSTM: it skips the whole frame, which runs in eager, and says nothing
    return lstm(x)[0]


print("eager:", torch.compile(h, backend=my_backend)(torch.randn(2, 3, 4)).shape)
"""


def test_a_custom_backend_that_raises_reads_as_a_compile_that_did_not_finish(tmp_path):
    """Every stage after the Dynamo graph is off a custom backend's path, so nothing read as unobserved and
    the headline read like a compile that worked."""
    import prov_trace

    (tmp_path / "b.py").write_text(BACKEND_RAISES)
    proc = cli("run", "--report", "r.md", "-o", "t.msgpack", "b.py", cwd=tmp_path, env=LIGHT)
    assert proc.returncode == 0 and "caught: BackendCompilerFailed" in proc.stdout, proc.stdout + proc.stderr
    # A frame Dynamo skipped with no exception reaching the program: the trace is the only place that says why,
    # live and in the report.
    assert "eager: torch.Size([2, 3, 4])" in proc.stdout
    assert ("prov-trace: [1/0] the compile raised Unsupported: Attempted to wrap RNN, GRU, or LSTM: Dynamo does not "
            "support RNN, GRU, or LSTM.\n") in proc.stderr
    # Dynamo ends a graph at the LSTM before it gives the frame up: that break is not said live, as the summary
    # does not list it (the frame compiled nothing; its compile raised).
    assert "[1/0] graph break" not in proc.stderr, proc.stderr
    # And in the summary at the end, which --quiet keeps: one line per compile that raised.
    assert proc.stdout.endswith("\n  [0/0] the compile raised BackendCompilerFailed, from RuntimeError: my "
                                "backend cannot do this.\n  [1/0] the compile raised Unsupported: Attempted to wrap "
                                "RNN, GRU, or LSTM: Dynamo does not support RNN, GRU, or LSTM.\n"), proc.stdout
    (skipped,) = [f["stopped_in"] for f in prov_trace.load(tmp_path / "t.msgpack").model["frames_without_graph"]
                  if f["qualname"] == "h"]
    assert skipped["error"]["type"] == "torch._dynamo.exc.Unsupported", skipped
    assert skipped["error"]["text"].startswith("Attempted to wrap RNN, GRU, or LSTM\n"), skipped
    assert ("b.py:19` (its compile stopped inside `_compile`, whose call did not return: it raised "
            "Unsupported: Attempted to wrap RNN, GRU, or LSTM: Dynamo does not support RNN, GRU, or LSTM)") in \
        (tmp_path / "r.md").read_text()
    assert re.search(r"^  Dynamo graph +fired .*, 1 call did not return$", proc.stdout, re.M), proc.stdout
    (graph,) = prov_trace.load(tmp_path / "t.msgpack").model["graphs"]
    assert graph["headline"]["unobserved"] == []
    stopped = dict(graph["headline"]["stopped_in"])
    error = stopped.pop("error")
    assert stopped == {"stage": "dynamo_graph", "target": "torch._dynamo.output_graph:OutputGraph._call_user_compiler",
                       "maybe_cut_short": []}
    # The backend's own exception, which Dynamo wraps: a builtin one whose argument is a string is read.
    assert error["type"] == "torch._dynamo.exc.BackendCompilerFailed", error
    assert error["inner"] == {"type": "builtins.RuntimeError", "text": "my backend cannot do this."}, error
    assert ("Its compile did not finish: it stopped inside `OutputGraph._call_user_compiler` (Dynamo graph's hook), "
            "whose call did not return: it raised BackendCompilerFailed, from RuntimeError: my backend cannot do "
            "this. ") in (tmp_path / "r.md").read_text()  # the exception's own full stop is not doubled


def test_a_run_whose_only_frame_dynamo_gave_up_on_says_its_lines_ran_uncompiled(tmp_path):
    """Dynamo gives an LSTM's frame up: the run compiles nothing, and the source section said "The trace names no
    file of the model's own" under a Counts section naming that frame at its file and line."""
    (tmp_path / "l.py").write_text("import torch\nlstm = torch.nn.LSTM(4, 4)\n\n\ndef h(x):\n    return lstm(x)[0]\n\n\n"
                                   "print(torch.compile(h)(torch.randn(2, 3, 4)).shape)\n")
    proc = cli("run", "-q", "--report", "r.md", "-o", "t.msgpack", "l.py", cwd=tmp_path, env=LIGHT)
    assert proc.returncode == 0 and "torch.Size([2, 3, 4])" in proc.stdout, proc.stdout + proc.stderr
    proc = cli("report", str(tmp_path / "t.msgpack"), "-o", "-")
    counts = proc.stdout.split("## Counts", 1)[1].split("\n## ", 1)[0]
    assert "Frames Dynamo compiled that produced no graph: 0/0 `h`" in counts, counts
    source = proc.stdout.split("## The model's source, line by line", 1)[1].split("\n## ", 1)[0]
    assert ("No line of the model's own holds an op: the frames Dynamo compiled produced no graph (Counts, above), "
            "so their lines ran uncompiled.") in source, source
    assert "names no file of the model's own" not in source


def test_a_run_whose_only_frame_held_no_op_says_dynamo_skipped_it_and_why(tmp_path):
    """A compiled function with no op (it returns its input): Dynamo skips the frame without an error, and every
    stage read DID NOT FIRE, the report's frame had no reason, and `check` said only "nothing was compiled".
    Dynamo's `_compile` returns its reason (torch 2.13's words), which each of them now says."""
    import prov_trace

    (tmp_path / "n.py").write_text("import torch\n\n\n@torch.compile\ndef f(x):\n    return x\n\n\n"
                                   "print(f(torch.ones(2)))\n")
    proc = cli("run", "-q", "--report", "r.md", "-o", "t.msgpack", "n.py", cwd=tmp_path, env=LIGHT)
    assert proc.returncode == 0 and "tensor([1., 1.])" in proc.stdout, proc.stdout + proc.stderr
    reason = "No ops traced for the FX graph. `torch.compile` will skip the frame and fall back to eager"
    assert proc.stdout.endswith(f"\n  [0/0] f (n.py:4): Dynamo skipped it and ran it as Python: {reason}\n"), proc.stdout
    assert "skipped" not in proc.stderr  # a skip is no failure: the live progress does not say it
    report = prov_trace.load(tmp_path / "t.msgpack")
    (frame,) = report.model["frames_without_graph"]
    assert frame["skipped"] == {"reason": f"Dynamo decided to skip the frame while tracing: {reason}."}, frame
    assert frame["stopped_in"] is None and frame["graph_break"] is None
    assert ("n.py:4` (Dynamo skipped it and ran it as Python: No ops traced for the FX graph. "
            "\\`torch.compile\\` will skip the frame and fall back to eager).") in (tmp_path / "r.md").read_text()
    check = cli("check", "t.msgpack", "--require", "post_grad:stack_trace>=0.5", cwd=tmp_path)
    assert check.returncode == 1
    assert ("the trace holds no graph: nothing was compiled (Dynamo skipped the frame it was handed and ran it as "
            f"Python: {reason})") in check.stdout, check.stdout


NO_COMPILER = """\
import torch
import torch._inductor.config as cfg

cfg.cpp.cxx = (None, "/nonexistent/c++")


def f(x):
    y = torch.sin(x) * 2
    return y.sum()


torch.compile(f)(torch.randn(16))
"""


def test_a_compile_that_fails_inside_inductor_says_where_the_measure_stops(tmp_path):
    """No C++ compiler: Inductor lowers the graph, then raises before its kernels are defined. The headline
    said "No line is lost on the way" for stages that never ran."""
    (tmp_path / "cxx.py").write_text(NO_COMPILER)
    proc = cli("run", "-q", "--report", "r.md", "-o", "t.msgpack", "cxx.py", cwd=tmp_path, env=LIGHT)
    assert proc.returncode == 1 and "InvalidCxxCompiler" in proc.stderr, proc.stdout + proc.stderr
    lines = {ln[:29].strip(): ln for ln in proc.stdout.splitlines() if ln.startswith("  ") and not ln.startswith("      ")}
    assert " fired " in lines["LoopLevelIR (post-pass)"] and " DID NOT FIRE " in lines["Kernel spec"], lines
    assert re.search(r"resolved, 1 event, 1 object$", lines["LoopLevelIR (post-pass)"]), lines
    text = (tmp_path / "r.md").read_text()
    assert "No line is lost on the way" not in text
    assert ("No line is lost up to LoopLevelIR (post-pass). Kernel spec and Artifact did not fire for this graph, so "
            "nothing is measured there: its compile stopped inside `GraphLowering.compile_to_module` (Artifact's "
            "hook), whose call did not return: it raised InductorError, from InvalidCxxCompiler: No working C++ "
            "compiler found in torch.\\_inductor.config.cpp.cxx: (None, '/nonexistent/c++'), and the run ended with "
            "an exception (Ended, above).") in text, text
    import prov_trace

    hl = prov_trace.load(tmp_path / "t.msgpack").model["graphs"][0]["headline"]
    assert hl["unobserved"] == ["kernel_spec", "artifact"] and hl["lines"] == 2 and hl["worst"] is None
    # The C++ compiler is needed when the emitted module is compiled: Inductor's compile_to_module raised.
    stopped = dict(hl["stopped_in"])
    assert stopped.pop("error")["inner"]["type"] == "torch._inductor.exc.InvalidCxxCompiler", hl
    assert stopped == {"stage": "artifact", "target": "torch._inductor.graph:GraphLowering.compile_to_module",
                       "maybe_cut_short": []}


CODEGEN_FAILS = """\
import torch
from torch._inductor.codegen.cpp import CppScheduling

real, made = CppScheduling.codegen_node, []


def codegen_node(self, node):  # a backend bug: it cannot generate the graph's second kernel
    made.append(node)
    if len(made) == 2:
        raise NotImplementedError("cannot generate this kernel")
    return real(self, node)


CppScheduling.codegen_node = codegen_node


def f(x, w):
    y = torch.sin(x) @ w
    return torch.tanh(y) + 1


torch.compile(f)(torch.randn(8, 8), torch.randn(8, 8))
"""


def test_a_compile_that_fails_while_making_its_kernels_does_not_call_the_next_line_a_drop(tmp_path):
    """Inductor's codegen raises at the second generated kernel (a backend that cannot generate it). The kernel
    spec holds the kernels made before, so line 19 (`tanh`) reads as lost there: it was ranked as "removed" and
    named in "Most lines are lost", and a rule on the kernel spec passed on the kernels made before."""
    (tmp_path / "cut.py").write_text(CODEGEN_FAILS)
    proc = cli("run", "-q", "--report", "r.md", "-o", "t.msgpack", "cut.py", cwd=tmp_path, env=LIGHT)
    assert proc.returncode == 1 and "cannot generate this kernel" in proc.stderr, proc.stdout + proc.stderr
    import prov_trace

    report = prov_trace.load(tmp_path / "t.msgpack")
    (g,) = report.model["graphs"]
    hl = g["headline"]
    stopped = dict(hl["stopped_in"])
    assert stopped.pop("error")["inner"] == {"type": "builtins.NotImplementedError",
                                             "text": "cannot generate this kernel"}, hl
    assert stopped == {"stage": "artifact", "target": "torch._inductor.graph:GraphLowering.compile_to_module",
                       "maybe_cut_short": ["kernel_spec"]}, hl
    assert [o["kind"] for o in g["stages"]["kernel_spec"]["objects"]] == ["generated", "extern"]
    row = next(r for r in g["survival"] if r["line"] == 19)
    assert (row["last_stage"], row["lost_at"]) == ("ir_post", "kernel_spec"), row
    assert hl["worst"] is None, hl
    (loss,) = g["losses"]
    assert loss["kind"].startswith("maybe cut short: the compile stopped inside GraphLowering.compile_to_module "
                                   "after this stage's last record"), loss
    text = (tmp_path / "r.md").read_text()
    assert "Kernel spec was recorded inside that call, so it may hold only what the compile made before it " \
           "stopped" in text and "Most lines are lost" not in text
    result = report.check("kernel_spec:origins=all", "ir_post:origins=all")
    assert [r["holds"] for r in result.results] == [False, True]
    assert result.results[0]["failures"][0]["why"] == (
        "the stage may be cut short: the graph's compile stopped inside GraphLowering.compile_to_module after it "
        "recorded 2, perhaps before it made them all")


#: A C++ compiler that answers --version (Inductor checks it) and fails every compile: a broken toolchain.
BROKEN_CXX = """\
#!/bin/sh
for a in "$@"; do [ "$a" = "--version" ] && exec g++ "$@"; done
echo "broken-cxx: this toolchain cannot compile" >&2
exit 1
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to answer --version")
def test_a_compile_whose_emitted_cpp_fails_to_build_keeps_its_kernel_spec_whole(tmp_path):
    """The same program with a working codegen and a C++ compiler that fails: Inductor made every kernel, then
    raised when it built them, inside the same compile_to_module call. The kernel spec was marked as perhaps
    cut short, and a rule on it failed, though it held every kernel; the exception says which it was."""
    cxx = tmp_path / "broken-cxx"
    cxx.write_text(BROKEN_CXX)
    cxx.chmod(0o755)
    (tmp_path / "cpp.py").write_text(CODEGEN_FAILS.replace(
        "CppScheduling.codegen_node = codegen_node\n",
        f"import torch._inductor.config as cfg\ncfg.cpp.cxx = (None, {str(cxx)!r})\n"))
    proc = cli("run", "-q", "--report", "r.md", "-o", "t.msgpack", "cpp.py", cwd=tmp_path, env=LIGHT)
    assert proc.returncode == 1 and "CppCompileError" in proc.stderr, proc.stdout + proc.stderr
    import prov_trace

    report = prov_trace.load(tmp_path / "t.msgpack")
    (g,) = report.model["graphs"]
    stopped = dict(g["headline"]["stopped_in"])
    assert stopped.pop("error")["inner"]["type"] == "torch._inductor.exc.CppCompileError", g["headline"]
    assert stopped == {"stage": "artifact", "target": "torch._inductor.graph:GraphLowering.compile_to_module",
                       "maybe_cut_short": []}
    assert [o["kind"] for o in g["stages"]["kernel_spec"]["objects"]] == ["generated", "extern", "generated"]
    assert all(r["lost_at"] in (None, "artifact") for r in g["survival"]), g["survival"]
    assert report.check("kernel_spec:origins=all").ok
    text = (tmp_path / "r.md").read_text()
    assert "it raised InductorError, from CppCompileError: C++ compile error" in text
    assert "may hold only what the compile made before it stopped" not in text


AFTER_INDUCTOR = """\
import torch
from torch._inductor.compile_fx import compile_fx


def backend(gm, inputs):  # a backend that fails after Inductor has compiled the graph whole
    compile_fx(gm, inputs)
    raise RuntimeError("failed after Inductor")


def f(x, w):
    y = torch.sin(x) @ w
    return torch.tanh(y) + 1


try:
    torch.compile(f, backend=backend)(torch.randn(8, 8), torch.randn(8, 8))
except Exception as exc:
    print("caught:", type(exc).__name__)
"""


def test_a_compile_that_fails_after_inductor_emitted_its_module_keeps_its_kernel_spec_whole(tmp_path):
    """The compile stops in Dynamo, after Inductor emitted the module: every kernel was made, so the kernel
    spec is the graph's, and no line is 'maybe cut short' there."""
    (tmp_path / "after.py").write_text(AFTER_INDUCTOR)
    proc = cli("run", "-q", "--report", "r.md", "-o", "t.msgpack", "after.py", cwd=tmp_path, env=LIGHT)
    assert proc.returncode == 0 and "caught: BackendCompilerFailed" in proc.stdout, proc.stdout + proc.stderr
    import prov_trace

    report = prov_trace.load(tmp_path / "t.msgpack")
    (g,) = report.model["graphs"]
    assert g["stages"]["artifact"]["observed"] and len(g["stages"]["kernel_spec"]["objects"]) == 3
    stopped = dict(g["headline"]["stopped_in"])
    assert stopped.pop("error")["inner"] == {"type": "builtins.RuntimeError", "text": "failed after Inductor"}
    assert stopped == {"stage": "dynamo_graph", "target": "torch._dynamo.output_graph:OutputGraph._call_user_compiler",
                       "maybe_cut_short": []}, g["headline"]
    assert report.check("kernel_spec:origins=all").ok


ONE_COMPILE_FAILS = """\
import torch
import torch._inductor.config as cfg


def f(x):
    y = torch.sin(x) * 2
    return y.sum()


def g(x):
    z = torch.cos(x) + 1
    return z.mean()


try:
    with cfg.patch({"cpp.cxx": (None, "/nonexistent/c++")}):
        torch.compile(f)(torch.randn(16))
except Exception as exc:
    print("caught:", type(exc).__name__)
print("g:", torch.compile(g)(torch.randn(16)).shape)
"""


def test_a_compile_that_fails_while_the_run_goes_on_says_where_that_graph_stopped(tmp_path):
    """One compile raises inside Inductor and the program catches it; the next compiles. The failed graph's
    headline said "(the Counts section shows which hooks did not fire)", where Counts showed every stage fired
    (for the other graph): the unwinds of its calls carried no compile id, so nothing tied them to it."""
    (tmp_path / "two.py").write_text(ONE_COMPILE_FAILS)
    proc = cli("run", "-q", "--report", "r.md", "-o", "t.msgpack", "two.py", cwd=tmp_path, env=LIGHT)
    assert proc.returncode == 0 and "caught: " in proc.stdout and "g: torch.Size([])" in proc.stdout, \
        proc.stdout + proc.stderr
    import prov_trace

    from prov_trace.stream.reader import read_trace

    unwinds = [r for r in read_trace(tmp_path / "t.msgpack").records
               if r.get("kind") == "probe" and r.get("phase") == "unwind"]
    # Every call the failed compile left open names that compile; the good one left none.
    assert unwinds and {r["compile_id"] for r in unwinds} == {"0/0"}, unwinds
    assert {r["stage"] for r in unwinds} >= {"source", "dynamo_graph", "aot_graph", "artifact"}, unwinds
    report = prov_trace.load(tmp_path / "t.msgpack")
    failed, good = report.model["graphs"]
    assert (failed["compile_id"], good["compile_id"]) == ("0/0", "1/0")
    assert failed["headline"]["unobserved"] == ["kernel_spec", "artifact"], failed["headline"]
    stopped = dict(failed["headline"]["stopped_in"])
    assert stopped.pop("error")["inner"]["type"] == "torch._inductor.exc.InvalidCxxCompiler", failed["headline"]
    assert stopped == {"stage": "artifact", "target": "torch._inductor.graph:GraphLowering.compile_to_module",
                       "maybe_cut_short": []}
    assert good["headline"]["unobserved"] == [] and good["headline"]["stopped_in"] is None, good["headline"]
    text = (tmp_path / "r.md").read_text()
    assert ("Kernel spec and Artifact did not fire for this graph, so nothing is measured there: its compile "
            "stopped inside `GraphLowering.compile_to_module` (Artifact's hook), whose call did not return: it raised "
            "InductorError, from InvalidCxxCompiler: No working C++ compiler found in ") in text
    assert "Counts section shows which hooks did not fire" not in text
    # A rule on the stage fails on that graph alone, and says why nothing was measured there.
    result = report.check("kernel_spec:origins=all")
    assert not result.ok and [(f["graph"], f["why"]) for f in result.results[0]["failures"]] == [
        ("0/0 inference", "the stage did not fire: nothing was measured (the graph's compile stopped inside "
                          "GraphLowering.compile_to_module: it raised InductorError, from InvalidCxxCompiler: No "
                          "working C++ compiler found in torch._inductor.config.cpp.cxx: (None, '/nonexistent/c++'))")]


RESET_BETWEEN = """\
import torch
import torch._dynamo


def f(x):
    return torch.sin(x) + 1


def g(x):
    return torch.cos(x) * 3


print(torch.compile(f)(torch.ones(8)).sum().item())
torch._dynamo.reset()
print(torch.compile(g)(torch.ones(8)).sum().item())
"""


def test_compiles_after_a_dynamo_reset_are_graphs_of_their_own(tmp_path):
    """torch._dynamo.reset() starts Dynamo's compile ids at 0/0 again: g's compile joined f's graph, one
    "0/0 inference" with both functions' lines, nodes and kernels summed."""
    import prov_trace

    (tmp_path / "r.py").write_text(RESET_BETWEEN)
    proc = cli("run", "-q", "--report", "r.md", "-o", "t.msgpack", "r.py", cwd=tmp_path, env=LIGHT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    model = prov_trace.load(tmp_path / "t.msgpack").model
    graphs = {g["label"]: g for g in model["graphs"]}
    assert list(graphs) == ["0/0 inference", "0/0#2 inference"]
    for label, line, op in (("0/0 inference", 6, "aten.sin.default"), ("0/0#2 inference", 10, "aten.cos.default")):
        stages = graphs[label]["stages"]
        assert [o["name"] for o in stages["source"]["objects"]] == [f"{tmp_path / 'r.py'}:{line}"]
        post = [o["target"] for o in stages["post_grad"]["objects"]]
        assert op in post and len(post) == 2, post
    assert "## Graph 0/0#2 inference" in (tmp_path / "r.md").read_text()


EXPORT_THEN_COMPILE = """\
import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.l(x))


ep = torch.export.export(M(), (torch.randn(2, 8),))
print(torch.compile(ep.module())(torch.randn(2, 8)).shape)
"""


def test_a_backward_graph_never_compiled_and_an_export_off_inductors_path_read_as_what_they_are(tmp_path):
    """A forward outside torch.no_grad() makes a backward graph Inductor compiles only at a backward call:
    its empty stages read "(the Counts section shows which hooks did not fire)". And `check` failed the
    exported program's FX post-grad, a stage off its path, as "the stage produced no objects"."""
    import prov_trace

    (tmp_path / "e.py").write_text(EXPORT_THEN_COMPILE)
    proc = cli("run", "-q", "--report", "r.md", "-o", "t.msgpack", "e.py", cwd=tmp_path, env=LIGHT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    graphs = {g["label"]: g for g in prov_trace.load(tmp_path / "t.msgpack").model["graphs"]}
    assert list(graphs) == ["export", "0/0 forward", "0/0 backward"]
    assert [g["headline"]["lazy_backward"] for g in graphs.values()] == [False, False, True]
    assert "post_grad" in graphs["0/0 backward"]["headline"]["unobserved"]
    assert ("did not fire for this graph: Inductor compiles a backward graph at its first backward call, and the run "
            "made none while it was traced") in (tmp_path / "r.md").read_text()

    rule = "post_grad:stack_trace>=0.5"
    both = cli("check", "t.msgpack", "--require", rule, cwd=tmp_path)
    assert both.returncode == 1 and both.stdout.splitlines()[1:3] == [
        "        graph 0/0 backward, FX post-grad: the stage did not fire: nothing was measured (Inductor compiles "
        "a backward graph at its first backward call, and the run made none; under torch.no_grad() there is no "
        "backward graph)",
        "0 of 1 rules hold; 1 failed"], both.stdout
    forward = cli("check", "t.msgpack", "--graph", "0/0 forward", "--graph", "export", "--require", rule, cwd=tmp_path)
    assert forward.returncode == 0 and forward.stdout.startswith(f"ok    {rule}  (1 cell)"), forward.stdout
    export = cli("check", "t.msgpack", "--graph", "export", "--require", rule, cwd=tmp_path)
    assert export.returncode == 1 and ("trace: the rule applies to no graph here: its cells are not applicable "
                                       "(not on this compile's path (torch.export)), so it checks nothing") in export.stdout


EXEC_SCRIPT = """\
import torch
src = '''
def f(x):
    y = x.sin()
    return y * 2
'''
ns = {}
exec(compile(src, "<generated>", "exec"), ns)
print(torch.compile(ns["f"])(torch.randn(4)).shape)
class M(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2
print(torch.compile(torch.fx.symbolic_trace(M()))(torch.randn(4)).shape)
"""


def test_code_made_from_a_string_is_not_called_library_code(tmp_path):
    """A function exec'd from a string has no file: the Source stage holds none of its lines. The note said its
    frame was 'library code ... as for an nn.Sequential: no line of your source is on this compile's path',
    while the survival table listed its two lines as the model's."""
    (tmp_path / "ex.py").write_text(EXEC_SCRIPT)
    proc = cli("run", "-q", "-o", "t.msgpack", "--report", "r.md", "ex.py", cwd=tmp_path, env=LIGHT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import prov_trace

    report = prov_trace.load(tmp_path / "t.msgpack")
    g, fx = report.model["graphs"]
    assert g["stages"]["source"]["objects"] == [] and g["stages"]["source"]["library"] == ["f (<generated>)"]
    rows = [(r["file"], r["line"], r["user"]) for r in g["survival"]]
    assert rows == [("<generated>", 3, True), ("<generated>", 4, True)], rows
    (note,) = g["notes"]
    assert note.startswith("Every frame Dynamo compiled for this graph is code with no file on disk (f (<generated>)): "
                           "made from a string by exec or compile()"), note
    assert note.endswith("2 of 2 pre-grad nodes carry a stack trace, which names its lines without their text."), note
    assert "library code" not in note
    # The forward symbolic_trace generated: FX keeps its text, and its name stays in the report's line labels
    # (it was cut to the path after "from", and read as a line of the script).
    (fx_note,) = fx["notes"]
    assert "code with no file on disk (forward (<eval_with_key>." in fx_note and fx_note.endswith("which names its lines.")
    (fx_file,) = {r["file"] for r in fx["survival"]}
    assert fx_file.startswith("<eval_with_key>.") and " from " in fx_file
    assert f"`<eval_with_key>.{fx_file.split('.', 1)[1].split(' ', 1)[0]} from " in report.to_markdown().replace("\\", "")
