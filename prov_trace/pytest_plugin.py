"""prov-trace's pytest plugin (registered through the ``pytest11`` entry point as ``prov_trace``).

- ``pytest --prov-trace[=DIR]`` traces the compiles of each test into a stream of its
  own, ``DIR/<node id>.msgpack`` (default DIR: ``prov-trace``), and prints one line per
  test that compiled something at the end.
- The ``prov_trace`` fixture traces a block and checks provenance rules::

      def test_mlp_keeps_provenance(prov_trace):
          with prov_trace:
              torch.compile(model)(x)
          prov_trace.check("post_grad:stack_trace>=0.5", "kernel_spec:origins=all")

  A failing rule fails the test with the matrix cell that broke it.

Nothing happens without ``--prov-trace`` or the fixture: importing this module imports
neither torch nor the rest of prov-trace. ``-p no:prov_trace`` turns the plugin off.
Docs: docs/pytest.md.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any

import pytest

DEFAULT_DIR = "prov-trace"
_PER_TEST = "prov_trace_per_test"
_BACKENDS = ("auto", "monitoring", "inject", "settrace")
_PROFILES = ("auto", "inductor-cpu", "inductor-triton", "spyre")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("prov-trace", "provenance of torch.compile (prov-trace)")
    group.addoption("--prov-trace", dest="prov_trace_dir", nargs="?", const=DEFAULT_DIR, default=None, metavar="DIR",
                    help=f"Trace each test's compiles into DIR/<node id>.msgpack (default DIR: {DEFAULT_DIR}) and "
                         "print a line per test that compiled something. Write --prov-trace=DIR (with '=').")
    group.addoption("--prov-trace-backend", dest="prov_trace_backend", choices=_BACKENDS, default="auto",
                    help="Event backend for --prov-trace and the prov_trace fixture (default: auto, the best available).")
    group.addoption("--prov-trace-profile", dest="prov_trace_profile", choices=_PROFILES, default="auto",
                    help="Profile for --prov-trace and the prov_trace fixture (default: auto, by this machine).")


def pytest_configure(config: pytest.Config) -> None:
    backend = config.getoption("prov_trace_backend")
    directory = config.getoption("prov_trace_dir")
    if backend != "auto" or directory:
        from prov_trace.api import backend_problem

        problem = backend_problem(backend)
        if problem:  # said once, before any test runs
            raise pytest.UsageError(f"prov-trace: {problem}")
    if directory:
        config.pluginmanager.register(PerTest(config, directory), _PER_TEST)


# --- names -------------------------------------------------------------------------------------


def stream_name(nodeid: str, taken: set[str] | None = None) -> str:
    """A file name for a test's stream: its node id with path and parameter punctuation made safe.

    ``tests/test_m.py::TestA::test_b[x-1]`` -> ``tests_test_m.py__TestA__test_b[x-1]``. A name cut
    for length, or one already taken by another node id in this session, gets a hash of the node id.
    """
    safe = re.sub(r"[^A-Za-z0-9._\-\[\]=+]+", "_", nodeid.replace("::", "__")).strip("._") or "test"
    if len(safe) > 150 or (taken is not None and safe in taken):
        safe = safe[:150] + "-" + hashlib.sha1(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    if taken is not None:
        taken.add(safe)
    return safe


def _cell_text(f: dict[str, Any]) -> str:
    from prov_trace.report.views import EMOJI

    glyph = EMOJI.get(f.get("state") or "", f.get("state") or "")
    counted = f.get("state") in ("all", "some", "none")
    return f"{glyph} {f['n']}/{f['total']}" if counted else str(glyph)


def failure_message(result: Any, titles: dict[str, str], path: str | None) -> str:
    """A failed check as a test failure: each failing rule, and the matrix cell behind it."""
    lines = []
    for r in result.results:
        if r["holds"]:
            continue
        lines.append(f"provenance rule failed: {r['rule']}")
        for f in r["failures"]:
            if f["graph"] is None:
                lines.append(f"    {f['why']}")
            else:
                lines.append(f"    graph {f['graph']}, {titles.get(f['stage'], f['stage'])}: {_cell_text(f)} ({f['why']})")
    if path:
        lines.append(f"trace: {path}")
    return "\n".join(lines)


# --- the fixture ---------------------------------------------------------------------------------


class ProvTrace:
    """The ``prov_trace`` fixture: ``with prov_trace:`` (or ``with prov_trace.trace(**options):``) traces a
    block; ``.report`` is its Report, ``.check(*rules)`` fails the test when a rule does not hold."""

    def __init__(self, request: pytest.FixtureRequest, directory: str, base: str, defaults: dict[str, Any],
                 on_trace: Any = None, on_failed_rule: Any = None):
        self._request = request
        self._dir = directory
        self._base = base
        self._defaults = defaults
        self._options: dict[str, Any] = {}
        self._on_trace = on_trace
        self._on_failed_rule = on_failed_rule
        self._count = 0
        self.tracer: Any = None

    def trace(self, **options: Any) -> "ProvTrace":
        """Options for the next ``with`` block: those of ``prov_trace.trace()`` (probes, keep_caches, ...)."""
        self._options = options
        return self

    def __enter__(self) -> "ProvTrace":
        from prov_trace import api

        self._count += 1
        name = self._base + ("" if self._count == 1 else f"-{self._count}") + ".msgpack"
        options = {**self._defaults, **self._options}
        self._options = {}
        problem = None
        try:
            self.tracer = api.trace(os.path.join(self._dir, name), **options).start()
        except api.ProvTraceError as exc:
            problem = f"prov-trace: {exc}"
        if problem is not None:  # failed outside the except: one sentence, no chained traceback
            pytest.fail(problem, pytrace=False)
        if self._on_trace is not None:
            self._on_trace(self.tracer.path)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        from prov_trace.signals import outcome

        if self.tracer is not None and self.tracer.active:
            self.tracer.stop(*outcome(exc_type, exc))

    @property
    def path(self) -> str | None:
        """The last block's stream."""
        return self.tracer.path if self.tracer is not None else None

    @property
    def report(self) -> Any:
        """The last traced block's Report."""
        if self.tracer is None:
            pytest.fail("prov-trace: nothing was traced yet: wrap the compile in `with prov_trace:` first", pytrace=False)
        if self.tracer.active:
            pytest.fail("prov-trace: the trace is still running: check it after the `with prov_trace:` block",
                        pytrace=False)
        return self.tracer.report()

    def matrix(self, graph: str | None = None) -> dict[str, Any]:
        return self.report.matrix(graph)

    def check(self, *rules: str, graphs: list[str] | None = None) -> Any:
        """Check rules (docs/check.md) over the last block's matrix; a failing rule fails the test."""
        from prov_trace.errors import ProvTraceError

        report = self.report
        problem = None
        try:
            result = report.check(*rules, graphs=graphs)
        except ProvTraceError as exc:  # a rule that doesn't parse, or names nothing here: one sentence
            problem = f"prov-trace: {exc}"
        if problem is not None:  # failed outside the except: no "during handling" chain in the test's failure
            pytest.fail(problem, pytrace=False)
        if not result.ok:
            if self._on_failed_rule is not None:  # the stream the message names is kept, compiled or not
                self._on_failed_rule(self.path)
            pytest.fail(failure_message(result, report.model["stage_titles"], self.path), pytrace=False)
        return result

    def _close(self) -> None:
        if self.tracer is not None and self.tracer.active:
            self.tracer.stop("ok", "the test ended with the trace still running")


@pytest.fixture
def prov_trace(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    """Trace a block of the test and assert provenance rules over it (docs/pytest.md)."""
    config = request.config
    per_test: PerTest | None = config.pluginmanager.get_plugin(_PER_TEST)
    defaults = {"backend": config.getoption("prov_trace_backend"), "profile": config.getoption("prov_trace_profile")}
    if per_test is not None:  # --prov-trace: the fixture's streams go with the others, listed at the end
        fixture = ProvTrace(request, per_test.directory, per_test.name_for(request.node.nodeid), defaults,
                            on_trace=lambda path: per_test.traced.append((request.node.nodeid, path)),
                            on_failed_rule=per_test.failed_rule.add)
    else:
        fixture = ProvTrace(request, str(tmp_path), "prov-trace", defaults)
    yield fixture
    fixture._close()


# --- --prov-trace: a stream per test -------------------------------------------------------------------


class PerTest:
    """Traces each test (setup, call and teardown) into its own stream, and lists them at the end."""

    def __init__(self, config: pytest.Config, directory: str):
        self.config = config
        self.directory = os.path.join(str(config.invocation_params.dir), directory)
        self.backend = config.getoption("prov_trace_backend")
        self.profile = config.getoption("prov_trace_profile")
        self.traced: list[tuple[str, str]] = []
        #: Streams a failed rule's message named: kept even where nothing was compiled.
        self.failed_rule: set[str] = set()
        self.names: set[str] = set()
        self.stopped: str | None = None
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            raise pytest.UsageError(f"prov-trace: cannot write streams to {self.directory}: {exc.strerror or exc}") from None

    def name_for(self, nodeid: str) -> str:
        return stream_name(nodeid, self.names)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any) -> Any:
        if self.stopped or "prov_trace" in getattr(item, "fixturenames", ()):
            yield  # a test with the fixture traces its own blocks
            return
        from prov_trace import api

        path = os.path.join(self.directory, self.name_for(item.nodeid) + ".msgpack")
        try:
            tracer = api.trace(path, backend=self.backend, profile=self.profile).start()
        except api.ProvTraceError as exc:
            self.stopped = f"tracing stopped at {item.nodeid}: {exc}"
            yield
            return
        self.traced.append((item.nodeid, path))
        try:
            yield
        finally:
            tracer.stop("ok")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from prov_trace import api
        from prov_trace.stream.reader import TraceReadError, read_trace

        tr = terminalreporter
        tr.section("prov-trace")
        lines, notes = [], set()
        compiled: dict[str, int] = {}  # test -> its streams that compiled (a test may trace several blocks)
        empty: set[str] = set()
        for nodeid, path in self.traced:
            try:
                header = read_trace(path).header or {}
                report = api.load(path)
            except (TraceReadError, OSError) as exc:
                lines.append(f"{nodeid}: the trace can't be read: {exc}")
                continue
            reason = header.get("backend_reason") or ""
            if header.get("backend") != "monitoring" and "not monitoring: " in reason:
                why = reason.split("not monitoring: ", 1)[1].split("; not ")[0]
                if why.count(")") > why.count("("):
                    why = why[:-1]
                notes.add(f"traced with {header.get('backend')}, not sys.monitoring: {why}")
            if not report.graphs:
                if path in self.failed_rule:
                    rel = os.path.relpath(path, str(self.config.invocation_params.dir))
                    lines.append(f"{nodeid}: nothing was compiled, and a rule failed on it -> {rel}")
                    continue
                empty.add(nodeid)
                try:
                    os.unlink(path)  # nothing compiled: nothing to keep
                except OSError:
                    pass
                continue
            compiled[nodeid] = compiled.get(nodeid, 0) + 1
            lines.append(_summary_line(nodeid, path, report, str(self.config.invocation_params.dir)))
        for note in sorted(notes):
            tr.write_line(f"prov-trace: {note}")
        if self.stopped:
            tr.write_line(f"prov-trace: {self.stopped}")
        for line in lines:
            tr.write_line(line)
        tests, streams = len(compiled), sum(compiled.values())
        nothing = len(empty - set(compiled) - {n for n, p in self.traced if p in self.failed_rule})
        tr.write_line(f"prov-trace: {tests} traced test{'s' if tests != 1 else ''} compiled something"
                      + (f" ({streams} streams)" if streams != tests else "")
                      + (f", {nothing} compiled nothing (no stream kept)" if nothing else "")
                      + f"; streams in {self.directory}")


def _summary_line(nodeid: str, path: str, report: Any, root: str) -> str:
    """One line for a traced test: its graphs, each stage's objects, and its stream."""
    objects = {row["stage"]: row for row in report.model["summary"]}
    stages = []
    for stage in report.model["stage_order"]:
        row = objects.get(stage)
        if row is None or (row["hooks"] == 0 and not row["observed"]):
            continue
        stages.append(f"{stage} {row['objects']}" if row["observed"] else f"{stage} -")
    graphs = report.graphs
    rel = os.path.relpath(path, root) if os.path.isabs(path) else path
    line = (f"{nodeid}: {len(graphs)} graph{'s' if len(graphs) != 1 else ''} ({', '.join(graphs)}); "
            + ", ".join(stages) + f" -> {rel}")
    if report.partial:
        line += f" (partial: {report.partial})"
    return line
