"""Where a `prov-trace run` spends its time: the phase marks the whole-process benchmark reads.

`PROV_TRACE_PHASES=FILE` makes `prov-trace run` write, as JSON, when the process started and when
each of its phases ended (docs/benchmarks.md, "The fixed costs"). These tests read the marks of the
session's real MLP audit (conftest's `mlp_run`) and check them against the run's own trace.
"""

from __future__ import annotations

import json

from prov_trace.stream.reader import read_trace

#: The phases of a model audit that writes a single-process report, in the order they end.
PHASES = ["prov-trace imported", "run called", "run set up", "profile chosen", "tracer started", "program ended",
          "report modules imported", "report: trace read", "report: model built", "report: rendered",
          "report written"]


def _marks(mlp_run) -> tuple[dict, list[tuple[str, float]]]:
    data = json.loads((mlp_run.workdir / "phases.json").read_text())
    return data, [(name, t) for name, t in data["marks"]]


def test_a_run_marks_every_phase_once_in_order(mlp_run):
    data, marks = _marks(mlp_run)
    assert [name for name, _ in marks] == PHASES
    times = [t for _, t in marks]
    assert times == sorted(times)
    # The process started before prov-trace was imported, and not long before (a few seconds at most,
    # even on a loaded machine): the start is read from /proc, not guessed.
    assert data["process_start"] is not None
    assert 0 <= times[0] - data["process_start"] < 30
    assert data["trace"] == str(mlp_run.trace)


def test_the_program_phase_holds_the_whole_compile(mlp_run):
    """Every probe record was written after the run was set up and before the program ended.

    A record's ``t_ns`` counts from the writer's start, which falls between the marks "run set up" and
    "tracer started"; so the last probe's ``t_ns`` is at most the time from "run set up" to "program ended".
    """
    _, marks = _marks(mlp_run)
    at = dict(marks)
    trace = read_trace(mlp_run.trace)
    probes = [r["t_ns"] for r in trace.records if r.get("kind") == "probe"]
    assert len(probes) >= 9, "the MLP audit's eval compile fires at least nine probes"
    assert 0 < min(probes) <= max(probes)
    assert max(probes) / 1e9 <= at["program ended"] - at["run set up"] + 0.001  # time.time()'s resolution
    # The compile is most of the program phase's time, and the report (read, build, render) is a small part.
    compile_span = (max(probes) - min(probes)) / 1e9
    assert compile_span > at["report written"] - at["program ended"]


def test_the_report_phases_add_up_to_the_report(mlp_run):
    """The report's steps sit between the program's end and the report written, and the file is there."""
    _, marks = _marks(mlp_run)
    names = [n for n, _ in marks]
    at = dict(marks)
    steps = names[names.index("program ended"):names.index("report written") + 1]
    assert steps[1:-1] == ["report modules imported", "report: trace read", "report: model built", "report: rendered"]
    assert at["report written"] - at["program ended"] >= 0
    assert mlp_run.report.stat().st_size > 0
