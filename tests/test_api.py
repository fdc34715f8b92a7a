"""The Python API (issue 15): `prov_trace.trace()`, `start()`/`stop()`, `load()` and the Report, on real compiles.

The MLP is compiled twice in this process, once untraced and once under
``prov_trace.trace()``: the outputs must be bitwise equal, and the report's matrix
is asserted on cells the report model's counting does not change (IR origins,
kernel-spec origins, IR traceback) plus invariants read from the same run.
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest
import torch

import prov_trace
from conftest import EXAMPLES, cli
from prov_trace import api
from prov_trace.report.check import RuleError
from prov_trace.runner import defeat_caches
from prov_trace.stream.reader import read_trace

HAS_MONITORING = hasattr(sys, "monitoring")


def _mlp():
    import importlib.util

    from conftest import EXAMPLES

    spec = importlib.util.spec_from_file_location("reference_mlp", EXAMPLES / "reference_mlp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    return mod.SimpleMLP().eval()


def _compile_once(model, x):
    torch._dynamo.reset()
    with torch.no_grad():
        return torch.compile(model)(x)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """(untraced output, traced output, the tracer, its report): one MLP compile each way."""
    defeat_caches()
    model = _mlp()
    x = torch.randn(2, 128, generator=torch.Generator().manual_seed(3))
    plain = _compile_once(model, x)
    path = tmp_path_factory.mktemp("api") / "mlp.msgpack"
    with prov_trace.trace(path) as t:
        out = _compile_once(model, x)
    return plain, out, t, t.report()


def test_the_api_does_not_change_what_the_code_computes(traced):
    plain, out, _, _ = traced
    assert plain.dtype == out.dtype and plain.shape == out.shape
    assert torch.equal(plain, out)
    assert plain.numpy().tobytes() == out.numpy().tobytes()


def test_matrix_values_on_a_real_compile(traced):
    _, _, t, report = traced
    assert t.ended == {"outcome": "ok", "detail": None, "records": t.records}
    assert report.partial is None and report.graphs == ["0/0 inference"]
    m = report.matrix("0/0 inference")
    assert report.matrix()["0/0 inference"] == m
    # Cells the report model's counting leaves alone: three IR ops, three kernels.
    assert m["origins"]["ir_pre"] == {"state": "all", "n": 3, "total": 3}
    assert m["origins"]["kernel_spec"] == {"state": "all", "n": 3, "total": 3}
    assert m["traceback"]["ir_pre"] == {"state": "none", "n": 0, "total": 3}
    # FX cells: whatever the count, stack_trace can't be on more objects at post-grad than there are.
    cell = m["stack_trace"]["post_grad"]
    assert 0 < cell["n"] <= cell["total"] and cell["state"] in ("all", "some")
    # Plain data all the way down.
    assert json.loads(json.dumps(report.matrix())) == report.matrix()
    with pytest.raises(KeyError, match="there is no graph '1/0 forward': the graphs are 0/0 inference"):
        report.matrix("1/0 forward")
    # A UsageError as well (one sentence, as every other bad input), and its text is the sentence, unquoted.
    with pytest.raises(prov_trace.UsageError) as err:
        report.matrix("1/0 forward")
    assert str(err.value) == "there is no graph '1/0 forward': the graphs are 0/0 inference"
    # A check of nothing would pass vacuously; a list where rules go, or a load of no path, are one sentence too.
    with pytest.raises(prov_trace.UsageError, match="^nothing to check: give at least one rule"):
        report.check()
    with pytest.raises(prov_trace.UsageError, match="^a rule is a string such as 'kernel_spec:origins=all', not a list"):
        report.check(["kernel_spec:origins=all"])
    with pytest.raises(prov_trace.UsageError, match=r"^load\(\) takes the path of a trace or of a directory of streams, not 123 \(int\)$"):
        prov_trace.load(123)


def test_renderers_and_load_agree(traced):
    _, _, t, report = traced
    again = prov_trace.load(t.path)
    assert again.matrix() == report.matrix()
    md, page, data = report.to_markdown(), report.to_html(), json.loads(report.to_json())
    assert md.startswith("#") and "Stage × Field" in md
    assert page.startswith("<!DOCTYPE html>")
    assert [g["label"] for g in data["graphs"]] == ["0/0 inference"]
    assert "prov-trace summary:" in report.summary_lines()[0]


def test_check_and_diff(traced):
    _, _, t, report = traced
    cell = report.matrix("0/0 inference")["stack_trace"]["post_grad"]
    ok = report.check("ir_pre:origins=all", "kernel_spec:origins=all", "ir_pre:traceback=none")
    assert ok.ok and bool(ok) and ok.failures == []
    bad = report.check("ir_pre:traceback=any", "ir_pre:origins=all")
    assert not bad.ok
    assert bad.failures == [{"rule": "ir_pre:traceback=any", "graph": "0/0 inference", "stage": "ir_pre",
                             "state": "none", "n": 0, "total": 3, "why": "0/3 populated (0%)"}]
    assert "FAIL  ir_pre:traceback=any" in str(bad)
    above = report.check(f"post_grad:stack_trace>={cell['n'] / cell['total']}")
    assert above.ok
    # A rule that doesn't parse: one sentence, and the trace is untouched.
    size = t.bytes
    with pytest.raises(RuleError) as info:
        report.check("post_grad stack_trace >= half")
    assert str(info.value).startswith("cannot read the rule 'post_grad stack_trace >= half': write STAGE:FIELD=LEVEL")
    assert not re.search(r"\w\. [A-Z]", str(info.value)) and "\n" not in str(info.value)  # one sentence
    assert read_trace(t.path).complete and t.bytes == size
    d = report.diff(prov_trace.load(t.path))
    assert d["regressions"] == []


def test_repr_html_is_a_sandboxed_self_contained_frame(traced):
    _, _, _, report = traced
    frame = report._repr_html_()
    assert frame.startswith('<iframe class="prov-trace-report"') and frame.endswith("></iframe>")
    m = re.fullmatch(r'<iframe ([^>]*?) srcdoc="([^"]*)"></iframe>', frame, re.S)
    assert m, frame[:300]
    attrs, srcdoc = m.groups()
    assert 'sandbox="allow-scripts"' in attrs and "allow-same-origin" not in attrs
    import html

    assert html.unescape(srcdoc) == report.to_html()
    # Nothing outside the frame: no style, script or link that could reach the notebook's page.
    assert not re.search(r"<(style|script|link)\b", attrs)
    assert "default-src 'none'" in html.unescape(srcdoc)
    assert repr(report) == "<prov-trace Report: 1 graph(s) ['0/0 inference'], complete>"


def test_a_trace_of_code_compiled_before_it_started_says_why_it_holds_no_graph(tmp_path):
    """A notebook cell run again: the compiled model runs from Dynamo's cache and nothing compiles. The report
    said only 'Nothing was compiled', though the cell plainly called a compiled model."""
    model = _mlp()
    x = torch.randn(2, 128)
    compiled = torch.compile(model)
    with torch.no_grad():
        compiled(x)
    with prov_trace.trace(tmp_path / "again.msgpack") as t:
        with torch.no_grad():
            compiled(x)
    report = t.report()
    assert report.graphs == []
    before = report.model["header"]["compiled_before"]
    assert isinstance(before, int) and before >= 1
    md = report.to_markdown()
    assert (f"Dynamo had compiled {before} graph{'s' if before != 1 else ''} in this process before tracing started. "
            "A call of code compiled then runs from Dynamo's cache") in md
    assert "call `torch._dynamo.reset()` before the traced block" in md
    (result,) = report.check("kernel_spec:origins=all").results
    assert result["failures"][0]["why"].startswith(
        f"the trace holds no graph: nothing was compiled (Dynamo had compiled {before} graph"), result
    # Once the user did reset, nothing is cached: the hint would send them to do what they did.
    torch._dynamo.reset()
    with prov_trace.trace(tmp_path / "after_reset.msgpack") as t:
        pass
    report = t.report()
    assert "compiled_before" not in report.model["header"] and "torch._dynamo.reset()" not in report.to_markdown()


def test_nesting_and_starting_twice_are_clear_errors(tmp_path):
    with prov_trace.trace(tmp_path / "a.msgpack") as outer:
        with pytest.raises(prov_trace.UsageError, match=r"^a trace is already running in this process \(writing .*a\.msgpack\): "
                                                        r"stop it before starting another$"):
            with prov_trace.trace(tmp_path / "b.msgpack"):
                pass
        with pytest.raises(prov_trace.UsageError, match="^a trace is already running"):
            outer.start()
        with pytest.raises(prov_trace.UsageError, match="^a trace is already running"):
            prov_trace.start(tmp_path / "c.msgpack")
    assert not (tmp_path / "b.msgpack").exists() and not (tmp_path / "c.msgpack").exists()
    assert read_trace(outer.path).complete
    with pytest.raises(prov_trace.UsageError, match="^this tracer has already run: make a new one to trace again$"):
        outer.start()
    with pytest.raises(prov_trace.UsageError, match="^no trace is running in this process: call prov_trace.start"):
        prov_trace.stop()
    with pytest.raises(prov_trace.UsageError, match="^this tracer was never started"):
        prov_trace.trace().stop()
    # A tracer never started has nothing to report, even where an earlier run left a trace at its path.
    with pytest.raises(prov_trace.UsageError, match="^this tracer was never started: there is nothing to report$"):
        prov_trace.trace(outer.path).report()


def test_start_and_stop(tmp_path):
    t = prov_trace.start(tmp_path / "s.msgpack")
    assert t.active
    report = prov_trace.stop()
    assert not t.active and report.partial is None and report.graphs == []
    assert t.ended["outcome"] == "ok"


TINY_CALLS = []


@pytest.mark.compile
def test_an_exception_in_the_body_leaves_a_complete_readable_trace(tmp_path):
    defeat_caches()

    @torch.compile
    def tiny(x):
        return torch.relu(x) + 1

    with pytest.raises(ValueError, match="after the compile"):
        with prov_trace.trace(tmp_path / "e.msgpack") as t:
            torch._dynamo.reset()
            with torch.no_grad():
                tiny(torch.ones(4))
            raise ValueError("after the compile")
    assert not t.active
    trace = read_trace(tmp_path / "e.msgpack")
    assert trace.complete and trace.problem is None
    assert trace.end["outcome"] == "exception" and trace.end["detail"] == "ValueError: after the compile"
    report = t.report()
    assert report.partial is None and report.graphs == ["0/0 inference"]
    assert report.check("kernel_spec:origins=all").ok
    # The next trace starts cleanly: the failed body left no tracer running.
    with prov_trace.trace(tmp_path / "next.msgpack"):
        pass


@pytest.mark.skipif(HAS_MONITORING, reason="sys.monitoring exists on this Python (3.12+)")
def test_monitoring_on_311_is_one_sentence_and_writes_nothing(tmp_path):
    earlier = tmp_path / "earlier.msgpack"
    earlier.write_bytes(b"an earlier trace")
    with pytest.raises(prov_trace.UsageError) as info:
        prov_trace.trace(earlier, backend="monitoring")
    v = sys.version_info
    assert str(info.value) == (f"the monitoring backend can't run here: sys.monitoring isn't available in Python "
                               f"{v.major}.{v.minor} (it needs 3.12+); use backend auto, which takes the best one available")
    assert earlier.read_bytes() == b"an earlier trace"


@pytest.mark.skipif(not HAS_MONITORING, reason="needs sys.monitoring (3.12+)")
def test_monitoring_with_every_tool_id_held_names_the_holders(tmp_path):
    mon = sys.monitoring
    free = [i for i in (3, 4) if mon.get_tool(i) is None]
    if len(free) < 2:
        pytest.skip(f"tool ids 3 and 4 are not both free here: {[mon.get_tool(i) for i in (3, 4)]}")
    earlier = tmp_path / "earlier.msgpack"
    earlier.write_bytes(b"an earlier trace")
    mon.use_tool_id(4, "other-profiler")
    mon.use_tool_id(3, "my-debugger")
    try:
        with pytest.raises(prov_trace.UsageError) as info:
            prov_trace.trace(earlier, backend="monitoring")
        assert str(info.value) == ("the monitoring backend can't run here: sys.monitoring tool ids 4 (held by "
                                   "'other-profiler'), 3 (held by 'my-debugger') are taken; use backend auto, which "
                                   "falls back to inject")
        # auto falls back, and says why, naming the holders.
        said = []
        with prov_trace.trace(tmp_path / "auto.msgpack", log=said.append) as t:
            pass
        assert read_trace(t.path).header["backend"] == "inject"
        assert any("4 (other-profiler), 3 (my-debugger)" in m for m in said), said
    finally:
        mon.free_tool_id(4)
        mon.free_tool_id(3)
    assert earlier.read_bytes() == b"an earlier trace"


def test_unknown_backend_and_profile(tmp_path):
    with pytest.raises(prov_trace.UsageError, match="^there is no backend named 'fast': choose one of auto, monitoring, inject, settrace$"):
        prov_trace.trace(tmp_path / "x.msgpack", backend="fast")
    with pytest.raises(prov_trace.UsageError, match="^there is no profile named 'tpu'"):
        prov_trace.trace(tmp_path / "x.msgpack", profile="tpu").start()
    assert api._active is None


CACHES = """\
import json, os, sys
import torch
import prov_trace

cfg = torch.compiler.config
seen = [[cfg.force_disable_caches, os.environ.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES")]]
with prov_trace.trace(sys.argv[1] + "/a.msgpack"):
    seen.append([cfg.force_disable_caches, os.environ.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES")])
seen.append([cfg.force_disable_caches, os.environ.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES")])
try:
    prov_trace.trace(sys.argv[1] + "/b.msgpack", profile="tpu").start()
except prov_trace.UsageError:
    seen.append([cfg.force_disable_caches, os.environ.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES")])
print(json.dumps(seen))
"""


def test_a_trace_hands_the_caches_back_as_it_found_them(tmp_path):
    """Tracing turns Inductor's caches off (a hit skips the stages after post-grad); stopping puts them back, so
    the rest of the process (a notebook, later untraced tests) compiles as it would have. In a fresh process:
    this one's tests turn them off for good (defeat_caches())."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_FORCE_DISABLE_CACHES",
                                                             "TORCH_COMPILE_FORCE_DISABLE_CACHES")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(EXAMPLES.parent), env.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-c", CACHES, str(tmp_path)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [[False, None], [True, "1"], [False, None], [False, None]]


def test_run_refuses_what_it_cannot_use_before_anything_runs(tmp_path):
    """The mistakes an API caller makes that the command line cannot: each one sentence, nothing written, no
    compile ('pdf' compiled the model, wrote the trace, then raised ValueError; a string of args reached the
    script split into characters; a tuple shape was an AttributeError)."""
    (tmp_path / "s.py").write_text("raise SystemExit('the script must not run')\n")
    model = str(EXAMPLES / "reference_mlp.py") + ":SimpleMLP"
    cases = [
        (dict(target=str(tmp_path / "s.py"), report_format="pdf"), "^there is no report format 'pdf': choose auto, md, html, json$"),
        (dict(target=str(tmp_path / "s.py"), args="--steps 3"),
         r"^args is one string \('--steps 3'\): give the program's arguments as a list, e.g. args=shlex.split\('--steps 3'\)$"),
        (dict(target=str(tmp_path / "s.py"), args=["--steps", 3]), r"^args holds 3 \(int\): every argument is a string"),
        (dict(target=model, input_shape=2.5), r"^input_shape is 2.5 \(float\): give sizes as \(2, 128\) or '2,128'$"),
        # A tuple is read as its sizes: here refused for its zero, before the model's module is imported.
        (dict(target=model, input_shape=(0, 128)), "^input_shape='0,128' is not a shape: every size must be a positive"),
        # Options are named as the caller wrote them: keywords, not the command line's flags.
        (dict(target=model, device="tpu"), r"^device='tpu' is not a device torch knows \(.*\): use e.g. cpu or cuda:0$"),
        (dict(target=model, dtype="float31"), r"^dtype='float31' is not a torch dtype: use e.g. float32"),
        (dict(target=None), r"^nothing to run: give a model \(file.py:Class\), a script \(file.py\), or module='MODULE'; "
                            r"see help\(prov_trace.run\)$"),
    ]
    for kw, message in cases:
        with pytest.raises(prov_trace.UsageError, match=message):
            prov_trace.run(**kw, output=str(tmp_path / "t.msgpack"), report=str(tmp_path / "r.md"),
                           log=lambda m: None, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.py"]


RUN_SCRIPT = """\
import gc, json, sys
import torch

@torch.compile
def f(x):
    return torch.relu(x) * 2 + 1

with torch.no_grad():
    f(torch.ones(8))
if sys.argv[2] == "off":
    gc.disable()  # the program's own choice, which must outlive the report prov-trace builds after it
json.dump({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}, open(sys.argv[1], "w"))
"""


@pytest.mark.compile
@pytest.mark.parametrize("collector", ["on", "off"])
def test_run_in_process_leaves_the_collector_as_the_program_left_it(tmp_path, collector):
    """`run` builds its report with the collector paused (api._collector_paused) and then hands the process
    back as the program left it, collector on or off, permanent generation untouched; the report is byte for
    byte what `prov_trace.load(...).render("md")` gives."""
    import gc

    defeat_caches()
    torch._dynamo.reset()
    script = tmp_path / "tiny.py"
    script.write_text(RUN_SCRIPT)
    seen = tmp_path / "seen.json"
    lines = []
    try:
        result = prov_trace.run(str(script), [str(seen), collector], output=str(tmp_path / "t.msgpack"),
                                report=str(tmp_path / "r.md"), progress=False, follow=False,
                                log=lines.append)
        after = {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}
    finally:
        gc.enable()
    assert result.exit_code == 0, lines
    assert after == json.loads(seen.read_text())
    assert after["enabled"] is (collector == "on")
    written = (tmp_path / "r.md").read_text()
    assert written == prov_trace.load(tmp_path / "t.msgpack").render("md")
    assert f"report written to {tmp_path / 'r.md'}" in lines


@pytest.mark.compile
def test_run_twice_in_one_process_compiles_twice_and_gives_the_callers_directory_back(tmp_path, monkeypatch):
    """A script run as python would: with no compiled code (its module's function, compiled by the first run,
    was answered from Dynamo's cache the second time: "Nothing was compiled"), and the caller's working
    directory back afterwards (as sys.argv and __main__ are), the program's in `cwd`."""
    (tmp_path / "mymod.py").write_text("import torch\n\ndef fn(x):\n    return torch.relu(x) * 3\n")
    (tmp_path / "sub").mkdir()
    script = tmp_path / "s.py"
    script.write_text("import os, torch, mymod\nprint(torch.compile(mymod.fn)(torch.ones(4)).sum().item())\n"
                      "os.chdir('sub')\n")
    monkeypatch.chdir(tmp_path)
    here = os.getcwd()
    try:
        for i in range(2):
            result = prov_trace.run(str(script), output=str(tmp_path / f"t{i}.msgpack"), report=None,
                                    progress=False, follow=False, log=lambda m: None)
            assert result.exit_code == 0
            assert prov_trace.load(result.trace).graphs == ["0/0 inference"], i
            assert os.getcwd() == here and result.cwd == str(tmp_path / "sub")
    finally:
        os.chdir(here)
        sys.modules.pop("mymod", None)


def test_the_command_line_leaves_the_program_where_it_chdir_ed_for_its_exit_handlers(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "s.py").write_text("import atexit, os\natexit.register(lambda: print('atexit in', os.getcwd()))\n"
                                   "os.chdir('sub')\n")
    proc = cli("run", "-q", "--no-report", "-o", "t.msgpack", "s.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"atexit in {tmp_path / 'sub'}" in proc.stdout


def test_collector_paused_restores_what_it_found_and_leaves_frozen_objects_frozen():
    import gc

    held = [object() for _ in range(1000)]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        fresh = [[] for _ in range(1000)]  # tracked by the collector, not frozen: a gc.freeze() inside would add them
        # Frozen objects can still be freed by another thread (a compile worker's), so the count may fall a
        # little; gc.unfreeze() would empty it, gc.freeze() would add `fresh`.
        with api._collector_paused():
            assert not gc.isenabled() and frozen // 2 < gc.get_freeze_count() < frozen + len(fresh)
        assert gc.isenabled() and frozen // 2 < gc.get_freeze_count() < frozen + len(fresh)
        gc.disable()
        with api._collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
    with pytest.raises(RuntimeError):
        with api._collector_paused():
            raise RuntimeError("a failed report")
    assert gc.isenabled() and held and fresh
