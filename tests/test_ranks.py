"""The merged report over several processes' streams (report/ranks.py), on streams made from one real trace.

Each "rank" is a copy of the reference MLP's real trace with a rank's header (rank, world size,
run id, host, pid), as `prov-trace run` writes them; a diverging rank has one kernel record
dropped, a cut one is truncated mid-record. The real multi-process runs are in test_follow.py.
"""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path

import msgpack
import pytest

from conftest import cli
from prov_trace.stream import schema


def _records(trace: Path) -> list[dict]:
    with open(trace, "rb") as f:
        return list(msgpack.Unpacker(f, **schema.UNPACK_OPTIONS))


def write_rank(src: Path, out: Path, rank: int, *, world: int = 8, run: str = "run-a", job: str | None = None,
               drop_last_kernel: bool = False, host: str = "node0", raised: str | None = None) -> Path:
    """A copy of `src` as rank `rank` of a run wrote it (`raised`: as if an uncaught exception with that text
    ended it after its compile)."""
    recs = _records(src)
    if raised is not None:
        assert recs[-1]["kind"] == "end"
        recs[-1].update({"outcome": "exception", "detail": raised})
    agent = 100 + zlib.crc32(run.encode()) % 30000  # one launcher per run
    recs[0].update({"rank": rank, "local_rank": rank % 4, "world_size": world, "run_id": run, "job_id": job,
                    "host": host, "pid": agent + 1 + rank, "ppid": agent, "restart": 0, "follow": "child"})
    if drop_last_kernel:
        last = max(i for i, r in enumerate(recs) if r.get("kind") == "probe" and r.get("stage") == "kernel_spec")
        del recs[last]
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        for r in recs:
            f.write(msgpack.packb(r, **schema.PACK_OPTIONS))
    return out


@pytest.fixture()
def eight(mlp_run, tmp_path) -> Path:
    d = tmp_path / "traces"
    for r in range(8):
        write_rank(mlp_run.trace, d / f"rank-{r}.msgpack", r)
    return d


def test_eight_identical_ranks_are_shown_once(eight):
    import prov_trace

    run = prov_trace.load(eight)
    assert run.agree and not run.divergences and run.partial is None
    assert [g["label"] for g in run.run["groups"]] == ["ranks 0–7"]
    md = run.to_markdown()
    assert "Ranks 0–7: identical" in md
    assert "No rank compiled differently." in md
    assert "## Report of rank 0" in md and "### Stage × Field matrix" in md  # the reference's report follows
    assert run.matrix("0/0 inference")["origins"]["ir_pre"]["state"] == "all"
    proc = cli("check", str(eight), "--require-ranks-agree", "--require", "kernel_spec:origins=all")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ranks 0–7 (8 processes, identical):" in proc.stdout and "ok    ranks agree" in proc.stdout


def test_a_diverging_rank_is_named_with_its_first_difference(mlp_run, eight, tmp_path):
    write_rank(mlp_run.trace, eight / "rank-5.msgpack", 5, drop_last_kernel=True)
    import prov_trace

    run = prov_trace.load(eight)
    assert not run.agree
    (div,) = run.divergences
    assert div["label"] == "rank 5"
    assert div["first"].startswith("graph 0/0 inference, Kernel spec: 2 kernels on rank 5, 3 kernels on rank 0")
    assert any(d["what"] == "kernel names" for d in div["differences"])
    md = run.to_markdown()
    assert "Ranks 0–4, 6–7: identical; 1 of 8 ranks compiled differently from rank 0: rank 5" in md
    assert "### Rank 5" in md
    proc = cli("check", str(eight), "--require-ranks-agree")
    assert proc.returncode == 1
    assert "FAIL  ranks agree" in proc.stdout and "rank 5 diverges from rank 0: graph 0/0 inference, Kernel spec" in proc.stdout
    proc = cli("report", str(eight), "-o", str(tmp_path / "r.md"))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr


def test_streams_of_two_runs_are_one_sentence_naming_both(mlp_run, eight):
    write_rank(mlp_run.trace, eight / "old" / "rank-0.msgpack", 0, run="run-b")
    proc = cli("report", str(eight), "-o", "-")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "2 different runs" in proc.stderr and "run run-a" in proc.stderr and "run run-b" in proc.stderr
    assert "--run" in proc.stderr
    picked = cli("report", str(eight), "--run", "run-a", "-o", "-")
    assert picked.returncode == 0 and "Ranks 0–7: identical" in picked.stdout
    assert "1 stream of another run was left out" in picked.stdout
    # diff has no --run (a side is one run): its sentence says what to do instead of suggesting it.
    diffed = cli("diff", str(eight), str(mlp_run.trace))
    assert diffed.returncode == 2 and "Traceback" not in diffed.stderr and len(diffed.stderr.strip().splitlines()) == 1
    assert f"A ({eight}) holds streams of 2 different runs" in diffed.stderr
    assert "2 different runs" in diffed.stderr and "--run" not in diffed.stderr and "move the other runs' streams" in diffed.stderr
    # check checks one run a call (docs/check.md): the same sentence and exit 2, then --run picks one.
    checked = cli("check", str(eight), "--require-ranks-agree")
    assert checked.returncode == 2 and "2 different runs" in checked.stderr and "--run run-" in checked.stderr
    assert "Traceback" not in checked.stderr and checked.stdout == ""
    picked = cli("check", str(eight), "--run", "run-a", "--require-ranks-agree")
    assert picked.returncode == 0 and "ok    ranks agree: ranks 0–7: identical" in picked.stdout, picked.stdout + picked.stderr


def test_a_rank_that_raised_is_said_once_in_a_line(mlp_run, tmp_path):
    """A rank an exception ended (after compiling the same) was only in its table cell, which held the whole
    multi-line text; the run still agrees: what it compiled is the same."""
    import prov_trace

    d = tmp_path / "traces"
    for r in range(2):
        write_rank(mlp_run.trace, d / f"rank-{r}.msgpack", r, world=2,
                   raised="RuntimeError: boom on rank 1\n\nSet TORCHDYNAMO_VERBOSE=1 for more" if r == 1 else None)
    run = prov_trace.load(d)
    assert run.agree
    assert "rank 1 ended with an exception (RuntimeError: boom on rank 1), after what its stream holds" in run.run["problems"]
    md = run.render("md")
    assert "| exception (RuntimeError: boom on rank 1) |" in md and "TORCHDYNAMO_VERBOSE" not in md


def test_a_rerun_into_the_same_directory_reports_the_newest_run(eight):
    """Run twice with -o traces/: the ranks' streams are replaced by name, the earlier launcher's pid-N stream
    is not; it compiled nothing. `report traces/` refused the two runs; it takes the newest and says what it
    left out. Streams of two runs that both compiled are still refused (the test above)."""
    import prov_trace

    first = _records(eight / "rank-0.msgpack")[0]
    with open(eight / "pid-99.msgpack", "wb") as f:
        for rec in ({**first, "rank": None, "local_rank": None, "run_id": "run-0", "pid": 99, "ppid": 1,
                     "start_time": (first.get("start_time") or 1.0) - 60, "follow": "parent"},
                    {"kind": "end", "seq": 1, "t_ns": 0, "outcome": "ok", "records": 1}):
            f.write(msgpack.packb(rec, **schema.PACK_OPTIONS))
    run = prov_trace.load(eight)
    assert run.agree and [g["label"] for g in run.run["groups"]] == ["ranks 0–7"]
    assert f"1 stream of another run was left out: {eight / 'pid-99.msgpack'}" in " ".join(run.run["problems"])
    proc = cli("report", str(eight), "-o", "-")
    assert proc.returncode == 0 and "Ranks 0–7: identical" in proc.stdout, proc.stderr


def test_a_worker_stopped_after_compiling_what_the_others_did_is_no_disagreement(mlp_run, tmp_path):
    """`with Pool(2) as p: p.map(...)`: the pool's exit SIGTERMs its idle workers, so one stream may end
    `signal` though its compile was over; `check --require-ranks-agree` failed on it. One stopped mid-compile
    (it lacks a kernel the others have) still fails."""
    import prov_trace

    d = tmp_path / "traces"
    for r in range(2):
        out = write_rank(mlp_run.trace, d / f"rank-{r}.msgpack", r, world=2)
    recs = _records(out)
    recs[-1].update({"outcome": "signal", "detail": "SIGTERM"})
    out.write_bytes(b"".join(msgpack.packb(r, **schema.PACK_OPTIONS) for r in recs))
    run = prov_trace.load(d)
    assert run.agree, run.run["problems"]
    assert "rank 1 was stopped (SIGTERM) after it had compiled the same as rank 0: nothing it compiled was cut short" \
        in run.run["problems"]
    assert cli("check", str(d), "--require-ranks-agree").returncode == 0
    write_rank(mlp_run.trace, out, 1, world=2, drop_last_kernel=True)
    recs = _records(out)
    recs[-1].update({"outcome": "signal", "detail": "SIGTERM"})
    out.write_bytes(b"".join(msgpack.packb(r, **schema.PACK_OPTIONS) for r in recs))
    run = prov_trace.load(d)
    assert not run.agree
    assert "rank 1 was stopped (SIGTERM) before it finished" in " ".join(run.run["problems"])
    assert "agreement cannot be established: rank 1 was stopped before its compile finished" in run.to_markdown()
    assert cli("check", str(d), "--require-ranks-agree").returncode == 1


def test_a_cut_rank_is_reported_cut_and_nothing_is_lost(eight):
    path = eight / "rank-3.msgpack"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    before = {p.name: p.read_bytes() for p in eight.iterdir()}
    import prov_trace

    run = prov_trace.load(eight)
    cut = [p for p in run.processes if p["status"] == "cut"]
    assert [p["rank"] for p in cut] == [3]
    assert all(p["status"] == "complete" for p in run.processes if p["rank"] != 3)
    assert "rank 3's stream (rank-3.msgpack) was cut short" in run.to_markdown()
    assert "the others are complete" in run.to_markdown()
    # Cut mid-compile, it lacks what it did not get to: the headline said it "compiled differently".
    assert "agreement cannot be established: rank 3 was cut short before its compile finished" in run.to_markdown()
    assert "compiled differently" not in run.to_markdown().split("## ", 2)[1]
    proc = cli("check", str(eight), "--require-ranks-agree")
    assert proc.returncode == 1 and "cut short" in proc.stdout
    assert {p.name: p.read_bytes() for p in eight.iterdir()} == before


def test_a_directory_with_no_stream_is_one_sentence(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no stream here")
    for args in (("report", str(tmp_path / "empty")), ("check", str(tmp_path / "empty"), "--require-ranks-agree"),
                 ("diff", str(tmp_path / "empty"), str(tmp_path / "empty"))):
        proc = cli(*args)
        assert proc.returncode == 2, args
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert "holds no prov-trace stream" in proc.stderr


def test_ranks_of_one_launcher_are_one_run(mlp_run, tmp_path):
    """`torchrun -m prov_trace run ...`: each rank its own prov-trace run (its own run id), no elastic job id
    (static rendezvous): the ranks one agent started are one run, and each wrote a file of its own."""
    for r in (0, 1):
        write_rank(mlp_run.trace, tmp_path / f"prov-trace.rank-{r}.msgpack", r, world=2, run="run-a")
    recs = _records(tmp_path / "prov-trace.rank-1.msgpack")
    recs[0]["run_id"] = "run-of-rank-1"
    (tmp_path / "prov-trace.rank-1.msgpack").write_bytes(b"".join(msgpack.packb(r, **schema.PACK_OPTIONS) for r in recs))
    import prov_trace

    run = prov_trace.load(tmp_path)
    assert run.agree and run.run["run_ids"] == ["run-a", "run-of-rank-1"]


def test_nodes_copied_side_by_side_are_one_job_and_a_missing_rank_is_said(mlp_run, tmp_path):
    """Two nodes, each its own `prov-trace run` (its own run id), one torchrun job (its --rdzv-id)."""
    d = tmp_path / "all"
    for r in (0, 1):
        write_rank(mlp_run.trace, d / "node0" / f"rank-{r}.msgpack", r, world=4, run="node0-run", job="job42")
    write_rank(mlp_run.trace, d / "node1" / "rank-2.msgpack", 2, world=4, run="node1-run", job="job42", host="node1")
    import prov_trace

    run = prov_trace.load(d)
    assert run.run["job_ids"] == ["job42"] and run.run["run_ids"] == ["node0-run", "node1-run"]
    assert run.run["missing_ranks"] == [3]
    assert not run.agree
    md = run.to_markdown()
    assert "Ranks 0–2: identical" in md and "no stream for rank 3" in md


def test_diff_of_two_runs_compares_rank_with_rank(mlp_run, eight, tmp_path):
    b = tmp_path / "b"
    for r in range(7):  # rank 7 is gone in B, rank 2 lost a kernel
        write_rank(mlp_run.trace, b / f"rank-{r}.msgpack", r, run="run-b", drop_last_kernel=r == 2)
    proc = cli("diff", str(eight), str(b), "--fail-on-regression")
    assert proc.returncode == 1, proc.stderr
    assert "## Rank 2" in proc.stdout and "## Rank 7" in proc.stdout
    assert "1 regression(s): rank 7 is missing from B" in proc.stderr
    rank2 = proc.stdout.split("## Rank 2", 1)[1].split("\n## ", 1)[0]
    assert "### Objects added and removed" in rank2 and "| Kernel spec | 3 | 2 |" in rank2
    single = cli("diff", str(mlp_run.trace), str(eight), "--fail-on-regression")
    assert single.returncode == 0, single.stdout + single.stderr
    assert "8 pairs of processes compared, 0 regressions." in single.stdout


def test_json_report_of_a_run(eight, tmp_path):
    out = tmp_path / "run.json"
    proc = cli("report", str(eight), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["format"] == "prov-trace-run"
    assert data["run"]["agree"] is True and len(data["run"]["processes"]) == 8
    assert data["reference"]["graphs"][0]["label"] == "0/0 inference"


def test_one_stream_in_a_directory_is_its_own_report(mlp_run, tmp_path):
    d = tmp_path / "one"
    d.mkdir()
    shutil.copy(mlp_run.trace, d / "pid-1.msgpack")
    a = cli("report", str(d), "-o", "-").stdout
    b = cli("report", str(d / "pid-1.msgpack"), "-o", "-").stdout
    assert a == b and a.startswith("# Source-to-kernel provenance audit\n")


def test_a_copied_stream_is_read_once(mlp_run, eight, tmp_path):
    """`cp rank-3.msgpack backup.msgpack` in the run's directory, or two copies of one process's stream: the same
    host, pid and start time are one process, noted once and in no count (they read as 9 processes, and two
    unranked copies compared as 'identical')."""
    import prov_trace

    shutil.copy(eight / "rank-3.msgpack", eight / "backup.msgpack")
    run = prov_trace.load(eight)
    assert run.agree, run.run["problems"]
    assert [g["label"] for g in run.run["groups"]] == ["ranks 0–7"]
    (note,) = [p for p in run.run["problems"] if "copy" in p]
    assert note == (f"{eight / 'backup.msgpack'} is a copy of {eight / 'rank-3.msgpack'} (the same host, pid and start "
                    "time: one process's stream): it is read once"), note
    md = run.to_markdown()
    assert md.startswith("# Source-to-kernel provenance audit: 8 processes\n"), md[:200]
    assert "| a copy of rank-3.msgpack |" in md
    # Two copies of one unranked process's stream: one process, with nothing to compare it with.
    d = tmp_path / "two"
    d.mkdir()
    shutil.copy(mlp_run.trace, d / "pid-1.msgpack")
    shutil.copy(mlp_run.trace, d / "pid-1-2.msgpack")
    run = prov_trace.load(d)
    assert len(run.run["groups"]) == 1 and run.run["groups"][0]["members"] == [0], run.run["groups"]
    assert run.to_markdown().startswith("# Source-to-kernel provenance audit: 1 process\n")
    assert "Only pid" in run.to_markdown() and "there is no other process to compare it with" in run.to_markdown()


def test_the_merged_html_works_in_a_browser_as_the_references_own(mlp_run, tmp_path):
    """The reference's interactive report inside the merged page: the page's self-test (matrix cells,
    lineage, a clicked source line) gives what it gives on the reference's own report."""
    from browser import selftest

    import prov_trace

    d = tmp_path / "traces"
    for r in range(2):
        write_rank(mlp_run.trace, d / f"rank-{r}.msgpack", r, world=2, drop_last_kernel=r == 1)
    run = prov_trace.load(d)
    (tmp_path / "run.html").write_text(run.to_html())
    (tmp_path / "rank0.html").write_text(run.report_of(0).to_html())
    def facts(value):  # everything but the timings
        if isinstance(value, dict):
            return {k: facts(v) for k, v in value.items() if k != "timing" and not k.endswith("_ms")}
        return [facts(v) for v in value] if isinstance(value, list) else value

    merged, own = facts(selftest(tmp_path, tmp_path / "run.html")), facts(selftest(tmp_path, tmp_path / "rank0.html"))
    assert merged == own and merged["graphs"] and merged["graphs"][0]["grid_cells"] > 0
