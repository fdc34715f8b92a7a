"""The command line as a user meets it: help, errors, and running scripts as python would."""

from __future__ import annotations

import sys
import textwrap

import pytest

from conftest import EXAMPLES, REPO, cli


def test_help_is_complete():
    top = cli("--help")
    assert top.returncode == 0
    for word in ("run", "report", "Exit status"):
        assert word in top.stdout
    commands = top.stdout[top.stdout.index("Commands:"):].split("\n\n")[0].splitlines()[1:]
    assert [c.split()[0] for c in commands] == ["check", "diff", "report", "run", "targets"], commands
    assert not any(c.rstrip().endswith("...") for c in commands), commands  # each summary whole
    run = cli("run", "--help")
    for opt in ("-m MODULE", "--output", "--report", "--input-shape", "--dtype", "--device", "--eval / --train",
                "--backend", "--profile", "--keep-caches", "example_inputs()", "Exit status"):
        assert opt in run.stdout, opt


def test_bare_prov_trace_prints_its_help():
    """click 8.2+ turned a bare group into an error ("prov-trace: error: Usage: ...", exit 2, on stderr)."""
    bare = cli()
    assert bare.returncode == 0 and bare.stderr == "", bare.stderr
    assert bare.stdout == cli("--help").stdout


def _one_error_line(proc, needle: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("prov-trace: error:")]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_targets_get_one_sentence(tmp_path):
    _one_error_line(cli("run"), "nothing to run")
    _one_error_line(cli("run", "nothing_here"), "neither a model target")
    _one_error_line(cli("run", "missing.py", cwd=tmp_path), "there is no file missing.py")
    _one_error_line(cli("run", "no_such_mod:Model", cwd=tmp_path), "cannot import no_such_mod")
    _one_error_line(cli("run", str(EXAMPLES / "reference_mlp.py") + ":Nope", cwd=tmp_path), "has no attribute Nope")


def test_unwritable_outputs_are_refused_before_running(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("open('ran', 'w').write('x')\n")
    proc = cli("run", "-o", str(tmp_path / "missing" / "t.msgpack"), str(script), cwd=tmp_path)
    _one_error_line(proc, "does not exist")
    assert not (tmp_path / "ran").exists()
    proc = cli("run", "-o", str(tmp_path / "same"), "--report", str(tmp_path / "same"), str(script), cwd=tmp_path)
    _one_error_line(proc, "same file")
    # An empty path (an unset shell variable) says so; it read "could not write the report to : Is a directory".
    _one_error_line(cli("run", "--report", "", str(script), cwd=tmp_path), "the report path is empty")
    _one_error_line(cli("report", str(script), "-o", "", cwd=tmp_path), "the report path is empty")
    # `prov-trace report` takes -o for the report, so `run -o audit.md` is a likely slip: it wrote the msgpack
    # stream into audit.md, and the report to provenance_audit.md.
    for name in ("audit.md", "audit.HTML", "audit.json"):
        proc = cli("run", "-o", name, str(script), cwd=tmp_path)
        _one_error_line(proc, f"--report {name} for the report")
        assert "(audit.msgpack)" in proc.stderr, proc.stderr
        assert not (tmp_path / name).exists()
    assert not (tmp_path / "ran").exists()


def test_uninferable_input_asks_for_input_shape(tmp_path):
    (tmp_path / "noparams.py").write_text(textwrap.dedent("""
        import torch
        class Act(torch.nn.Module):
            def forward(self, x):
                return torch.relu(x)
    """))
    proc = cli("run", "noparams.py:Act", cwd=tmp_path)
    _one_error_line(proc, "--input-shape")
    _one_error_line(cli("run", "noparams.py:Act", "--input-shape", "2,a", cwd=tmp_path), "is not a shape")


SCRIPT = textwrap.dedent("""
    import os, sys
    print("argv", sys.argv)
    print("path0", sys.path[0])
    print("main", __name__, sys.modules["__main__"].__file__ == __file__)
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "exit3":
        sys.exit(3)
    if mode == "raise":
        def inner():
            raise ValueError("boom from the script")
        inner()
""")


def test_script_runs_as_python_would(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    plain = __import__("subprocess").run([sys.executable, str(script), "a", "--flag"], capture_output=True, text=True, cwd=tmp_path)
    proc = cli("run", "--no-report", "-o", str(tmp_path / "t.msgpack"), str(script), "a", "--flag", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    prog_lines = [ln for ln in proc.stdout.splitlines() if ln.split(" ")[0] in ("argv", "path0", "main")]
    assert prog_lines == plain.stdout.splitlines()


@pytest.mark.parametrize("mode,code", [("exit3", 3), ("raise", 1), ("", 0)])
def test_script_exit_status_and_traceback(tmp_path, mode, code):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    proc = cli("run", "-o", str(tmp_path / "t.msgpack"), "--report", str(tmp_path / "r.md"), str(script), mode, cwd=tmp_path)
    assert proc.returncode == code, proc.stderr
    from prov_trace.stream.reader import read_trace

    t = read_trace(tmp_path / "t.msgpack")
    assert t.complete
    assert t.end["outcome"] == {"exit3": "exit", "raise": "exception", "": "ok"}[mode]
    if mode == "raise":
        plain = __import__("subprocess").run([sys.executable, str(script), "raise"], capture_output=True, text=True)
        # The script's own traceback, with prov-trace's frames cut out.
        tb = proc.stderr[proc.stderr.index("Traceback"):]
        assert "ValueError: boom from the script" in tb and 'in inner' in tb
        assert "prov_trace" not in tb
        assert tb.count("File ") == plain.stderr.count("File ")


def test_dash_m_runs_a_module(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "tool.py").write_text("import sys\nprint('tool', __name__, sys.argv[1:])\nsys.exit(int(sys.argv[1]))\n")
    proc = cli("run", "--no-report", "-o", str(tmp_path / "t.msgpack"), "-m", "mypkg.tool", "5", cwd=tmp_path)
    assert proc.returncode == 5, proc.stderr
    assert "tool __main__ ['5']" in proc.stdout
    _one_error_line(cli("run", "-m", "not_a_module_here", cwd=tmp_path), "no module named not_a_module_here")


def test_script_compiles_are_all_traced(tmp_path):
    script = tmp_path / "two.py"
    script.write_text(textwrap.dedent("""
        import torch
        @torch.compile
        def f(x):
            return torch.sin(x) + 1
        @torch.compile
        def g(x):
            return torch.cos(x) * 2
        with torch.no_grad():
            print(f(torch.ones(4)).sum().item(), g(torch.ones(4)).sum().item())
    """))
    proc = cli("run", "-o", str(tmp_path / "t.msgpack"), "--report", str(tmp_path / "r.md"), str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    from prov_trace.report.model import build
    from prov_trace.stream.reader import read_trace

    model = build(read_trace(tmp_path / "t.msgpack"))
    assert [g["label"] for g in model["graphs"]] == ["0/0 inference", "1/0 inference"]
    for g in model["graphs"]:
        assert g["stages"]["kernel_spec"]["objects"], g["label"]
    texts = {s["text"] for g in model["graphs"] for s in g["survival"]}
    assert {"return torch.sin(x) + 1", "return torch.cos(x) * 2"} <= texts


def test_the_command_lines_choices_are_the_registries():
    """`--profile` and `--backend` list what exists: the command line's lists are the registries' keys."""
    from prov_trace import cli as cli_mod
    from prov_trace.probes.profiles import PROFILES
    from prov_trace.tracer.core import CHOICES

    assert cli_mod.PROFILES == ("auto", *PROFILES)
    assert cli_mod.BACKENDS == CHOICES


def test_the_misplaced_options_hint_keeps_values_and_the_program():
    """The command the hint writes moves the options with their values ahead of the program, -m MODULE
    included, and leaves the program's own arguments after it."""
    from prov_trace.cli import _misplaced_options_hint

    hint = _misplaced_options_hint(["-m", "mypkg.train", "--steps"], ["3", "-o", "m.msgpack", "--report=m.md", "-q"])
    assert hint == ("prov-trace options go before the program: -o, --report, -q came after it, so the program got "
                    "them; write `prov-trace run -o m.msgpack --report=m.md -q ... -m mypkg.train --steps 3` "
                    "(... for any other options)")
    assert _misplaced_options_hint(["train.py"], ["--steps", "3"]) is None
    one = _misplaced_options_hint(["train.py"], ["--lr", "0.1", "--output", "my dir/t.msgpack"])
    assert "--output came after it, so the program got it;" in one
    assert "`prov-trace run --output 'my dir/t.msgpack' ... train.py --lr 0.1`" in one


def test_a_directory_or_zip_to_run_is_one_sentence(tmp_path):
    """python runs a directory's or a zip's __main__.py; prov-trace says what to give it instead, not a
    SyntaxError from reading a zip as source."""
    import zipfile

    (tmp_path / "appdir").mkdir()
    (tmp_path / "appdir" / "__main__.py").write_text("print('hi')\n")
    with zipfile.ZipFile(tmp_path / "app.zip", "w") as z:
        z.writestr("__main__.py", "print('hi')\n")
    _one_error_line(cli("run", "appdir", cwd=tmp_path), "appdir is a directory: prov-trace runs a script file or -m MODULE; "
                                                         "give its appdir/__main__.py")
    _one_error_line(cli("run", "app.zip", cwd=tmp_path), "app.zip is a zip archive")


def test_a_closed_or_failing_standard_output(tmp_path):
    """`targets | head -1`: the reader went away, and the command ends by SIGPIPE as cat or grep do (it exited
    1, which for targets reads as "drifted"). A standard output that fails otherwise (a full disk) is one
    sentence, exit 2 (it was a traceback)."""
    import os
    import signal
    import subprocess

    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    try:
        proc = subprocess.run([sys.executable, "-m", "prov_trace", "targets", "--profile", "inductor-cpu"],
                              stdout=write, stderr=subprocess.PIPE, text=True, cwd=tmp_path, timeout=300)
    finally:
        os.close(write)
    assert proc.returncode == -signal.SIGPIPE, (proc.returncode, proc.stderr)
    assert proc.stderr == "", proc.stderr
    # A stream whose writes fail as a full disk's do (no device node is written).
    full = textwrap.dedent("""
        import errno, io, sys
        class Full(io.TextIOBase):
            def write(self, s):
                raise OSError(errno.ENOSPC, "No space left on device")
        sys.stdout = Full()
        sys.argv = ["prov-trace", "targets", "--profile", "inductor-cpu"]
        from prov_trace.cli import main
        main()
    """)
    proc = subprocess.run([sys.executable, "-c", full], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    _one_error_line(proc, "could not write to standard output: No space left on device")
