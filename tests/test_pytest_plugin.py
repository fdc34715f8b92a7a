"""The pytest plugin (issue 15), through pytester in subprocesses (torch.compile is involved).

The plugin is loaded the way a user gets it: through the ``pytest11`` entry point that
pyproject.toml declares. Where the environment was installed before that entry point
existed, the test adds a distribution that declares exactly the entry point of
pyproject.toml (read from it), so the entry point itself is what is exercised.
"""

from __future__ import annotations

import os
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

from conftest import REPO
from prov_trace.pytest_plugin import stream_name

pytest_plugins = ["pytester"]

HAS_MONITORING = hasattr(sys, "monitoring")


def _declared_entry_point() -> str:
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - 3.11 has it
        pytest.skip("tomllib is not available")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return project["entry-points"]["pytest11"]["prov_trace"]


@pytest.fixture
def plugin_env(tmp_path_factory, monkeypatch):
    """PYTHONPATH for pytester's subprocess: this checkout, and the entry point when it isn't installed."""
    declared = _declared_entry_point()
    assert declared == "prov_trace.pytest_plugin"
    paths = [str(REPO)]
    installed = [ep for ep in metadata.entry_points(group="pytest11") if ep.name == "prov_trace"]
    if not installed:
        site = tmp_path_factory.mktemp("site")
        dist = site / "prov_trace_pytest_entry-0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: prov-trace-pytest-entry\nVersion: 0\n")
        (dist / "entry_points.txt").write_text(f"[pytest11]\nprov_trace = {declared}\n")
        paths.append(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    monkeypatch.delenv("COVERAGE_PROCESS_START", raising=False)


TESTS = """\
import torch


def fresh():
    torch._dynamo.reset()

    @torch.compile
    def tiny(x):
        return torch.relu(x) + 1

    with torch.no_grad():
        return tiny(torch.ones(4))


def test_rule_holds(prov_trace):
    with prov_trace:
        out = fresh()
    assert out.sum().item() == 8.0
    result = prov_trace.check("kernel_spec:origins=all", "ir_pre:origins>=0.5")
    assert result.ok


def test_rule_fails(prov_trace):
    with prov_trace:
        fresh()
    prov_trace.check("ir_pre:traceback=any")


def test_rule_does_not_parse(prov_trace):
    with prov_trace:
        pass
    prov_trace.check("post_grad stack_trace at least half")


def test_plain_compile():
    assert fresh().sum().item() == 8.0


def test_compiles_nothing():
    assert 1 + 1 == 2


class TestGroup:
    def test_param(self):
        pass
"""


@pytest.mark.compile
def test_plugin_traces_each_test_and_checks_rules(pytester, plugin_env):
    pytester.makepyfile(test_models=TESTS)
    result = pytester.runpytest_subprocess("--prov-trace=streams", "-rA", timeout=900)
    result.assert_outcomes(passed=4, failed=2)
    out = result.stdout.str()
    # A failing rule fails the test with the matrix cell in the message.
    result.stdout.fnmatch_lines([
        "*provenance rule failed: ir_pre:traceback=any",
        "*graph 0/0 inference, LoopLevelIR (pre-pass): ❌ 0/* (0/* populated (0%))",
        f"*trace: *{os.sep}streams{os.sep}test_models.py__test_rule_fails.msgpack",
    ])
    # A rule that doesn't parse: one sentence.
    result.stdout.fnmatch_lines(["*prov-trace: cannot read the rule 'post_grad stack_trace at least half': write STAGE:FIELD=LEVEL*"])
    section = out[out.index("_ test_rule_does_not_parse _"):]
    section = section[:section.index("\n_", 1) if "\n_" in section[1:] else len(section)]
    assert "During handling of the above exception" not in section, section  # the sentence alone
    # One line per test that compiled something, with its stream; the rest counted.
    streams = pytester.path / "streams"
    for name in ("test_rule_holds", "test_rule_fails", "test_plain_compile"):
        line = next((ln for ln in out.splitlines() if ln.startswith(f"test_models.py::{name}: ")), None)
        assert line is not None, out[-3000:]
        assert re.fullmatch(rf"test_models.py::{name}: 1 graph \(0/0 inference\); source \d+, dynamo_graph \d+, pre_grad \d+, "
                            rf"aot_graph \d+, post_grad \d+, "
                            rf"ir_pre \d+, ir_post \d+, kernel_spec \d+, artifact \d+ -> streams/test_models.py__{name}.msgpack", line), line
        assert (streams / f"test_models.py__{name}.msgpack").stat().st_size > 0
    assert "prov-trace: 3 traced tests compiled something, 3 compiled nothing (no stream kept)" in out
    assert not (streams / "test_models.py__test_compiles_nothing.msgpack").exists()
    # The streams are real traces: their reports hold the compile.
    import prov_trace

    plain = prov_trace.load(streams / "test_models.py__test_plain_compile.msgpack")
    assert plain.check("kernel_spec:origins=all").ok and plain.partial is None


def test_stream_names_are_safe_and_distinct():
    taken: set[str] = set()
    assert stream_name("tests/test_m.py::TestA::test_b[x-1]", taken) == "tests_test_m.py__TestA__test_b[x-1]"
    assert stream_name("tests/test_m.py::test_c[a/b c]", taken) == "tests_test_m.py__test_c[a_b_c]"
    clash = stream_name("tests/test_m.py::test_c[a b/c]", taken)
    assert clash.startswith("tests_test_m.py__test_c[a_b_c]-") and len(clash) == len("tests_test_m.py__test_c[a_b_c]") + 11
    long = stream_name("t.py::test_" + "x" * 400)
    assert len(long) == 161 and re.fullmatch(r"[\w.\-\[\]=+]+", long)
    assert stream_name("../../etc/passwd::x") == "etc_passwd__x"


def test_no_prov_trace_turns_it_off(pytester, plugin_env):
    pytester.makepyfile(test_off="""
        import sys

        def test_not_loaded():
            assert "prov_trace.pytest_plugin" not in sys.modules
            assert "torch" not in sys.modules
    """)
    result = pytester.runpytest_subprocess("-p", "no:prov_trace")
    result.assert_outcomes(passed=1)
    result = pytester.runpytest_subprocess("-p", "no:prov_trace", "--prov-trace")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*unrecognized arguments: --prov-trace*"])
    # Loaded but unused, the plugin imports neither torch nor the rest of prov-trace.
    pytester.makepyfile(test_on="""
        import sys

        def test_loaded_and_idle(request):
            assert request.config.pluginmanager.has_plugin("prov_trace")
            assert "torch" not in sys.modules and "prov_trace.api" not in sys.modules
    """)
    result = pytester.runpytest_subprocess("test_on.py")
    result.assert_outcomes(passed=1)


@pytest.mark.compile
def test_coexists_with_coverage_sysmon_and_pytest_cov(pytester, plugin_env, monkeypatch):
    pytest.importorskip("pytest_cov")
    monkeypatch.setenv("COVERAGE_CORE", "sysmon")
    pytester.makepyfile(helper="""
        def covered():
            return 42
    """)
    pytester.makepyfile(test_cov="""
        import sys
        import torch
        import helper

        def test_both(prov_trace):
            with prov_trace:
                torch._dynamo.reset()
                with torch.no_grad():
                    torch.compile(lambda x: torch.relu(x) * 2)(torch.ones(3))
                assert helper.covered() == 42
                mon = getattr(sys, "monitoring", None)
                if mon is not None:
                    assert mon.get_tool(mon.COVERAGE_ID) == "coverage.py"
                    assert "prov-trace" in map(mon.get_tool, (3, 4))
            prov_trace.check("kernel_spec:origins=any")
    """)
    result = pytester.runpytest_subprocess("--cov=helper", "--cov-report=term-missing", "--prov-trace=streams",
                                           "-p", "no:cacheprovider", timeout=900)
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    # coverage measured the line that ran while prov-trace traced ...
    assert re.search(r"helper\.py\s+2\s+0\s+100%", out), out[-3000:]
    # ... and prov-trace traced the compile, listed at the end.
    assert "test_cov.py::test_both: 1 graph (0/0 inference);" in out
    header = __import__("prov_trace.stream.reader", fromlist=["read_trace"]).read_trace(
        pytester.path / "streams" / "test_cov.py__test_both.msgpack").header
    assert header["backend"] == ("monitoring" if HAS_MONITORING else "inject")


HOLDERS = """\
import sys

mon = sys.monitoring
mon.use_tool_id(4, "holder-four")
mon.use_tool_id(3, "holder-three")
"""


@pytest.mark.skipif(not HAS_MONITORING, reason="needs sys.monitoring (3.12+)")
def test_no_tool_id_free_is_one_sentence_naming_the_holders(pytester, plugin_env):
    pytester.makeconftest(HOLDERS)
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    # With the monitoring backend asked for: pytest stops before any test, with one sentence.
    result = pytester.runpytest_subprocess("--prov-trace=streams", "--prov-trace-backend=monitoring")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: prov-trace: the monitoring backend can't run here: sys.monitoring tool ids "
                                 "4 (held by 'holder-four'), 3 (held by 'holder-three') are taken; use backend auto, "
                                 "which falls back to inject"])
    # With auto, it falls back, and the end of the run says why, naming them.
    result = pytester.runpytest_subprocess("--prov-trace=streams")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["prov-trace: traced with inject, not sys.monitoring: every sys.monitoring tool id "
                                 "prov-trace may use is taken: 4 (holder-four), 3 (holder-three)"])


BLOCKS = """\
import os
import torch


def fresh():
    torch._dynamo.reset()
    with torch.no_grad():
        return torch.compile(lambda x: torch.relu(x) + 1)(torch.ones(4))


def test_two_blocks(prov_trace):
    with prov_trace:
        fresh()
    with prov_trace:
        fresh()
    # Each trace puts Inductor's caches back as it found them: later tests compile as they would untraced.
    assert not torch.compiler.config.force_disable_caches
    assert "TORCHINDUCTOR_FORCE_DISABLE_CACHES" not in os.environ


def test_rule_on_nothing(prov_trace):
    with prov_trace:
        pass
    prov_trace.check("kernel_spec:origins=all")
"""


@pytest.mark.compile
def test_the_summary_counts_tests_and_keeps_the_stream_a_failure_names(pytester, plugin_env, monkeypatch):
    """A test of two blocks was counted as two tests; a failed rule on a block that compiled nothing named a
    stream the summary then deleted; a traced block left the caches off for the rest of the session."""
    for var in ("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "TORCH_COMPILE_FORCE_DISABLE_CACHES"):
        monkeypatch.delenv(var, raising=False)  # the caches on as the session starts (this suite's tests set it)
    pytester.makepyfile(test_blocks=BLOCKS)
    result = pytester.runpytest_subprocess("--prov-trace=streams", "-rA", timeout=900)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    named = re.search(r"trace: (\S+test_blocks.py__test_rule_on_nothing.msgpack)", out).group(1)
    assert os.path.exists(named), out[-3000:]
    assert ("test_blocks.py::test_rule_on_nothing: nothing was compiled, and a rule failed on it -> "
            "streams/test_blocks.py__test_rule_on_nothing.msgpack") in out
    assert "prov-trace: 1 traced test compiled something (2 streams); streams in " in out, out[-3000:]
