"""User probes: `--probe` / `--probes FILE.toml`, the generic snapshot, and a real compile with one attached."""

from __future__ import annotations

import dataclasses
import re
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO, Run, cli
from prov_trace.stream import schema
from prov_trace.probes import user
from prov_trace.contract import ENTRY, RETURN, ProbeCall, Profile

FUSE = "torch._inductor.scheduler:Scheduler.fuse_nodes"


# --- the command-line form ----------------------------------------------------------------------


def test_parse_spec_forms():
    p = user.parse_spec(FUSE)
    assert (p.target, p.event, p.stage) == (FUSE, "return", "Scheduler.fuse_nodes")
    p = user.parse_spec(f"{FUSE}@both=fusion")
    assert (p.event, p.stage, p.origin) == ("both", "fusion", f"--probe '{FUSE}@both=fusion'")
    assert [h.event for h in p.hooks()] == [ENTRY, RETURN] and {h.stage for h in p.hooks()} == {"fusion"}
    assert user.parse_spec(f"{FUSE}@entry").event == "entry"
    assert user.parse_spec("pkg.mod:outer.<locals>.inner=x").stage == "x"
    assert user.parse_spec("pkg.mod:outer.<locals>.inner").stage == "outer.inner"


@pytest.mark.parametrize("text, says", [
    ("no_colon_here", "is not a target"),
    (f"{FUSE}@exit", "'exit' is not an event"),
    (f"{FUSE}@", "'@' must be followed by"),
    (f"{FUSE}=", "'=' must be followed by a stage name"),
    (f"{FUSE}=fusion@both", "put '@EVENT' before '=STAGE'"),
    (f"{FUSE}=kernel_spec", "'kernel_spec' is a built-in stage"),
    (f"{FUSE}=compile_error", "'compile_error' is a built-in stage"),  # no column, but the report reads it
    (f"{FUSE}=has space", "is not a stage name"),
    ("pkg.mod:<locals>.f", "'<locals>' must sit between"),
])
def test_parse_spec_errors_say_what_is_wrong(text, says):
    with pytest.raises(user.ProbeSpecError, match="^--probe '") as e:
        user.parse_spec(text)
    assert says in str(e.value)


def test_a_repeated_probe_is_an_error():
    with pytest.raises(user.ProbeSpecError, match="repeats --probe"):
        user.hooks_for([user.parse_spec(f"{FUSE}@both=f"), user.parse_spec(f"{FUSE}@return=f")])
    assert len(user.hooks_for([user.parse_spec(f"{FUSE}@entry=f"), user.parse_spec(f"{FUSE}@return=f")])) == 2


# --- the file form ----------------------------------------------------------------------------------


def test_example_probes_file_parses():
    probes = user.load_file(str(EXAMPLES / "probes.toml"))
    assert [(p.target, p.event, p.stage) for p in probes] == [
        (FUSE, "both", "fusion"), ("torch._inductor.graph:GraphLowering.run_node", "entry", "lowering")]
    assert probes[0].origin.endswith("probes.toml:11")  # the target's line


@pytest.mark.parametrize("text, line, says", [
    ('[[probe]]\ntarget = "a.b:c"\nevent = "both\n', 3, "not valid TOML"),
    ('[[probe]]\ntarget = "a.b:c"\ncolour = "red"\n', 3, "unknown key 'colour' in probe 1"),
    ('[[probe]]\ntarget = "a.b:c"\n\n[[probe]]\nstage = "s"\n', 4, "probe 2 has no target"),
    ('[[probe]]\ntarget = "a.b:c"\nevent = "exit"\n', 3, "'exit' is not an event"),
    ('[[probe]]\ntarget = "a.b:c"\n# a comment\nstage = "ir_pre"\n', 4, "'ir_pre' is a built-in stage"),
    ('[[probe]]\ntarget = 3\n', 2, "'target' in probe 1 must be a string"),
    ('[[probe]]\n\ntarget = "not a target"\n', 3, "is not a target"),
    ('version = 1\n[[probe]]\ntarget = "a.b:c"\n', 1, "unknown key 'version'"),
    ('[probes]\ntarget = "a.b:c"\n', 1, "unknown key 'probes'"),
    ('# nothing here\n', 1, "no [[probe]] table"),
    ('probe = "a.b:c"\n', 1, "'probe' must be an array of tables"),
])
def test_a_wrong_file_names_the_line_and_the_problem(tmp_path, text, line, says):
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(user.ProbeSpecError) as e:
        user.load_file(str(path))
    assert str(e.value).startswith(f"{path}:{line}: "), str(e.value)
    assert says in str(e.value)


def test_a_wrong_file_exits_2_before_anything_runs(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[probe]]\ntarget = "a.b:c"\nevent = "sometimes"\n')
    for args in (["targets", "--probes", str(bad)],
                 ["run", str(EXAMPLES / "reference_mlp.py") + ":SimpleMLP", "--probes", str(bad)],
                 ["run", "--probe", "nope", str(EXAMPLES / "reference_mlp.py") + ":SimpleMLP"]):
        proc = cli(*args, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("prov-trace: error: "), proc.stderr
    assert f"{bad}:3: 'sometimes' is not an event" in cli("targets", "--probes", str(bad), cwd=tmp_path).stderr
    assert not (tmp_path / "prov-trace.msgpack").exists()
    missing = cli("targets", "--probes", str(tmp_path / "none.toml"), cwd=tmp_path)
    assert missing.returncode == 2 and "there is no probes file" in missing.stderr


# --- the generic snapshot -----------------------------------------------------------------------------


CALLED: list[str] = []


class Hostile:
    """Every hook a snapshot could trip over records that it ran."""

    def __repr__(self):
        CALLED.append("__repr__")
        return "hostile"

    def __str__(self):
        CALLED.append("__str__")
        return "hostile"

    def __getattr__(self, name):
        CALLED.append(f"__getattr__({name})")
        raise AttributeError(name)

    def __len__(self):
        CALLED.append("__len__")
        return 0

    def __eq__(self, other):
        CALLED.append("__eq__")
        return False

    __hash__ = object.__hash__


@dataclasses.dataclass
class Holder:
    name: str
    items: list
    thing: object = None

    @property
    def computed(self):
        CALLED.append("property")
        return 1


@dataclasses.dataclass(slots=True)
class Slotted:
    a: int
    b: object = None


def test_generic_snapshot_never_runs_user_code():
    CALLED.clear()
    h = Hostile()
    snaps = [user.snapshot_value(v) for v in (h, [h, h], {"k": h}, Holder("n", [], h), Slotted(0, h), (h,))]
    assert CALLED == [], CALLED
    assert snaps[0] == {"type": f"{__name__}.Hostile", "populated": True, "kind": "generic",
                        "value": {"type": f"{__name__}.Hostile"}}
    holder = snaps[3]
    assert holder["kind"] == "dataclass"
    assert [f["name"] for f in holder["value"]["declared_fields"]] == ["name", "items", "thing"]
    assert holder["value"]["fields"]["items"] == {"has": True, "populated": False, "type": "list",
                                                  "value": {"type": "list", "len": 0, "items": []}}
    assert holder["value"]["fields"]["thing"]["value"] == {"type": f"{__name__}.Hostile"}
    slotted = snaps[4]["value"]["fields"]
    assert slotted["a"]["populated"] and slotted["a"]["value"] == 0  # 0 counts as populated
    assert "hostile" not in repr(snaps)


def test_generic_probe_records_arguments_and_return_value():
    def target(self, nodes, *rest, flag=None, **kw):
        return nodes

    frame_locals = {"self": Hostile(), "nodes": [], "rest": (1,), "flag": None, "kw": {}}

    class _Frame:  # the probe reads only the frame's code, for the parameter names
        f_code = target.__code__

    entry = user.generic_probe(ProbeCall(ENTRY, frame_locals, None, _Frame()))
    assert list(entry) == ["args"] and list(entry["args"]) == ["self", "nodes", "flag", "rest", "kw"]
    assert not entry["args"]["nodes"]["populated"] and entry["args"]["rest"]["populated"]
    ret = user.generic_probe(ProbeCall(RETURN, frame_locals, [1, 2], _Frame()))
    assert ret["return"]["populated"] and ret["return"]["value"]["len"] == 2


# --- nested functions and late imports, through a real session -----------------------------------------


def test_probe_on_a_nested_function_in_a_module_imported_later(tmp_path):
    import importlib

    from prov_trace.report.model import build
    from prov_trace.stream.reader import read_trace
    from prov_trace.tracer.session import TraceSession
    from prov_trace.stream.writer import TraceWriter

    name = "prov_trace_late_module_for_test"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent('''
        import dataclasses

        @dataclasses.dataclass
        class Box:
            value: int
            tags: list

        def outer(n):
            def inner(box):
                return box.value * 2
            return inner(Box(n, [])) + 1
        '''))
    assert name not in sys.modules
    hooks = user.hooks_for([user.parse_spec(f"{name}:outer.<locals>.inner@both=inner"),
                            user.parse_spec(f"{name}:outer")])
    sys.path.insert(0, str(tmp_path))
    try:
        path = tmp_path / "t.msgpack"
        with TraceSession(TraceWriter(path), Profile("none", "no built-in hooks", ()), extra_hooks=hooks,
                          log=lambda m: None):
            mod = importlib.import_module(name)
            assert mod.outer(3) == 7
            assert mod.outer(0) == 1
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)
    model = build(read_trace(path))
    assert not model["errors"], model["errors"]
    assert sorted((h["target"], h["event"], h["fired"]) for h in model["hooks"]) == [
        (f"{name}:outer", "return", 2), (f"{name}:outer.<locals>.inner", "entry", 2),
        (f"{name}:outer.<locals>.inner", "return", 2)]
    assert all(h["resolved"] and h["installed"] for h in model["hooks"])
    assert [st for st in model["stage_order"] if st not in schema.STAGES] == ["inner", "outer"]
    assert model["stage_order"][-2:] == ["inner", "outer"]
    # No compile ran: the snapshots belong to no graph, and are counted apart.
    assert model["graphs"] == []
    assert model["outside_compile"] == [
        {"stage": "inner", "target": f"{name}:outer.<locals>.inner", "compile_id": None, "snapshots": 4},
        {"stage": "outer", "target": f"{name}:outer", "compile_id": None, "snapshots": 2}]
    from prov_trace.report.readers import read_stage

    records = [r for r in read_trace(path).records if r.get("kind") == "probe" and r.get("stage") == "inner"]
    inner = read_stage("inner", records).objects
    assert [o["name"].split(" (")[1] for o in inner] == ["entry)", "return)"] * 2
    assert set(inner[1]["fields"]) == {"box", "return"} and inner[1]["kinds"]["box"] == "dataclass"
    assert [o["fields"]["return"]["populated"] for o in inner if "return" in o["fields"]] == [True, True]  # 6 and 0
    assert all(o["fields"]["box"]["populated"] for o in inner)
    outer = read_stage("outer", [r for r in read_trace(path).records if r.get("kind") == "probe" and r.get("stage") == "outer"]).objects
    assert [o["fields"]["n"]["populated"] for o in outer] == [True, True]  # 0 counts as populated


# --- a real compile with a user probe --------------------------------------------------------------------


@pytest.fixture(scope="module")
def fusion_run(tmp_path_factory) -> Run:
    d = tmp_path_factory.mktemp("fusion")
    proc = cli("run", str(EXAMPLES / "reference_mlp.py") + ":SimpleMLP", "--probe", f"{FUSE}@both=fusion",
               "-o", str(d / "t.msgpack"), "--report", str(d / "audit.md"), cwd=d, check=True)
    return Run(proc, d / "t.msgpack", d / "audit.md", d)


def test_user_probe_column_with_real_counts(fusion_run):
    model = fusion_run.model()
    assert not model["errors"], model["errors"]
    # Every stock stage a torch.compile reaches (the export graph is torch.export's), then the probe's.
    assert model["stage_order"] == [*(st for st in schema.STAGES if st != schema.EXPORT_GRAPH), "fusion"]
    hook = {(h["target"], h["event"]): h for h in model["hooks"]}
    assert hook[(FUSE, "entry")]["fired"] == hook[(FUSE, "return")]["fired"] >= 1
    (g,) = model["graphs"]
    objs = g["stages"]["fusion"]["objects"]
    calls = hook[(FUSE, "entry")]["fired"]
    assert len(objs) == 2 * calls
    for o in objs:
        assert o["kind"] == FUSE and o["fields"]["self"]["populated"] and o["fields"]["nodes"]["populated"]
        assert o["kinds"]["nodes"] == "scheduler_nodes"
    assert sum("return" in o["fields"] for o in objs) == calls
    rows = {(r["layer"], r["field"]): r["cells"] for r in g["matrix"]}
    assert rows[("Probe", "nodes")]["fusion"] == {**rows[("Probe", "nodes")]["fusion"], "state": "all",
                                                  "n": 2 * calls, "total": 2 * calls}
    # `return` is measured on the return snapshots: every call returned a value, none lost it at entry.
    assert rows[("Probe", "return")]["fusion"] == {**rows[("Probe", "return")]["fusion"], "state": "all",
                                                   "n": calls, "total": calls}
    # The scheduler nodes carry their IR ops' source lines, so the column counts them per line...
    surv = {r["text"]: r for r in g["survival"]}
    assert surv["x = self.fc1(x)"]["counts"]["fusion"] >= 1
    # ...but a side column never decides where a line is lost.
    assert surv["x = self.fc1(x)"]["lost_at"] is None and surv["x = torch.relu(x)"]["lost_at"] == "artifact"
    summary = next(r for r in model["summary"] if r["stage"] == "fusion")
    assert summary["objects"] == 2 * calls and summary["fired"] == 2 * calls


def test_user_probe_column_in_the_markdown_report(fusion_run):
    calls = next(h["fired"] for h in fusion_run.model()["hooks"] if h["target"] == FUSE and h["event"] == "entry")
    text = fusion_run.report.read_text()
    counts = text.split("## Counts", 1)[1].split("##", 1)[0]
    header = next(ln for ln in counts.splitlines() if ln.startswith("| Graph"))
    row = next(ln for ln in counts.splitlines() if ln.startswith("| 0/0 inference"))
    assert header.rstrip(" |").endswith("fusion")
    assert row.rstrip(" |").rsplit("|", 1)[-1].strip() == str(2 * calls)
    assert "`nodes`" in text.split("## Stage × Field matrix", 1)[1]
    assert any(ln.strip().startswith("fusion") and "fired" in ln for ln in fusion_run.proc.stdout.splitlines())


def test_docs_exist_for_probes_and_profiles():
    probes = (REPO / "docs" / "probes.md").read_text()
    assert "--probe" in probes and "--probes" in probes and "[[probe]]" in probes and "examples/probes.toml" in probes
    prof = (REPO / "docs" / "profiles.md").read_text()
    from prov_trace.probes import profiles

    for p in profiles.PROFILES.values():
        assert f"`{p.name}`" in prof
        for h in p.hooks:
            assert h.target in prof, h.target


def test_one_probe_spec_as_a_string_is_one_probe_not_its_characters():
    from prov_trace.api import user_hooks

    hooks = user_hooks("torch.nn.functional:relu@both=relu")  # @both: an entry hook and a return hook
    assert [(h.stage, h.target, h.event) for h in hooks] == [("relu", "torch.nn.functional:relu", "entry"),
                                                            ("relu", "torch.nn.functional:relu", "return")]
    assert [h.stage for h in user_hooks(["torch.nn.functional:relu=a", "torch.nn.functional:gelu=b"])] == ["a", "b"]


OWN_FUNCTIONS = """\
import torch


def helper(x):
    return x * 2


class Box:
    def meth(self):
        return 3


f = torch.compile(lambda x: torch.relu(x) + 1)
print(f(torch.ones(4)).sum().item())
print(helper(2), Box().meth())
"""


def test_a_probe_on_the_programs_own_function_called_outside_a_compile(tmp_path):
    """Its snapshots while no compile ran are no graph: they read as a `torch.export` graph whose every
    Inductor stage was empty, and `kernel_spec:origins=all`, which holds for the compile, failed on it."""
    import prov_trace

    (tmp_path / "s.py").write_text(OWN_FUNCTIONS)
    proc = cli("run", "-q", "-o", "t.msgpack", "--report", "r.md", "--probe", "__main__:helper@both=myhelper",
               "--probe", "__main__:Box.meth", "s.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "4.0 3" not in proc.stdout and "8.0\n4 3\n" in proc.stdout  # the program's own output, unchanged
    report = prov_trace.load(tmp_path / "t.msgpack")
    assert report.graphs == ["0/0 inference"]
    assert report.model["outside_compile"] == [
        {"stage": "myhelper", "target": "__main__:helper", "compile_id": None, "snapshots": 2},
        {"stage": "Box.meth", "target": "__main__:Box.meth", "compile_id": None, "snapshots": 1}]
    assert report.check("kernel_spec:origins=all").ok
    assert cli("check", "t.msgpack", "--require", "kernel_spec:origins=all", cwd=tmp_path).returncode == 0
    summary = {ln.split()[0]: ln for ln in proc.stdout.splitlines() if ln.startswith("  ")}
    assert summary["myhelper"].split()[1] == "outside" and summary["myhelper"].endswith("(+2 taken while no compile ran)")
    text = (tmp_path / "r.md").read_text()
    assert "## Graph export" not in text and "torch.export" not in text.split("## Hooks", 1)[0]
    assert ("Probe snapshots taken while no compile ran (the program called the function itself), so they belong "
            "to no graph and no rule is checked on them: `__main__:helper` (myhelper) 2 snapshots, "
            "`__main__:Box.meth` (Box.meth) 1 snapshot.") in text


EXPORTS_THEN_A_CALL = """\
import torch


def helper(x):
    return x * 2


class M(torch.nn.Module):
    def forward(self, x):
        return helper(torch.relu(x))


class N(torch.nn.Module):
    def forward(self, x):
        return helper(torch.tanh(x)) + 1


first = torch.export.export(M(), (torch.randn(4),))
second = torch.export.export(N(), (torch.randn(4),))
print("after the exports:", helper(torch.ones(2)).tolist())
"""


def test_a_probe_called_inside_each_export_and_after_them_goes_where_it_ran(tmp_path):
    """A user probe outside any compile took the id of the last export, so its snapshot after the exports
    joined that export's graph; inside the second export it took the first's."""
    import prov_trace
    from prov_trace.stream.reader import read_trace

    (tmp_path / "s.py").write_text(EXPORTS_THEN_A_CALL)
    proc = cli("run", "-q", "-o", "t.msgpack", "--probe", "__main__:helper=myhelper", "s.py", cwd=tmp_path)
    assert proc.returncode == 0 and "after the exports: [2.0, 2.0]" in proc.stdout, proc.stderr
    ids = [(r["stage"], r["compile_id"]) for r in read_trace(tmp_path / "t.msgpack").records
           if r.get("kind") == "probe" and r["stage"] in ("myhelper", "export_graph")]
    assert ids == [("myhelper", "export"), ("export_graph", "export"),
                   ("myhelper", "export-2"), ("export_graph", "export-2"), ("myhelper", None)]
    model = prov_trace.load(tmp_path / "t.msgpack").model
    assert [(g["label"], len(g["stages"]["myhelper"]["objects"])) for g in model["graphs"]] == [
        ("export", 1), ("export-2", 1)]
    assert model["outside_compile"] == [{"stage": "myhelper", "target": "__main__:helper", "compile_id": None,
                                         "snapshots": 1}]


FAILED_EXPORT_THEN_A_CALL = """\
import torch


def helper(x):
    return x * 2


class Bad(torch.nn.Module):
    def forward(self, x):
        helper(x)
        raise ValueError("this model cannot be exported")


try:
    torch.export.export(Bad(), (torch.randn(4),))
except Exception as exc:
    print("the export failed:", type(exc).__name__)
print("after it:", helper(torch.ones(2)).tolist())
"""


def test_a_probe_called_after_an_export_that_raised_goes_to_no_graph_and_the_report_says_where_it_stopped(tmp_path):
    """The context skips its frame walk when the session's open target calls hold no ``_export``. An export
    that raised leaves its call open there (no event says it left), so a probe after it must still walk
    and find no export running, not join the failed export."""
    from prov_trace.stream.reader import read_trace

    (tmp_path / "s.py").write_text(FAILED_EXPORT_THEN_A_CALL)
    proc = cli("run", "-q", "-o", "t.msgpack", "--probe", "__main__:helper=myhelper", "s.py", cwd=tmp_path)
    assert "the export failed" in proc.stdout and "after it: [2.0, 2.0]" in proc.stdout, proc.stderr
    assert proc.returncode == 0, proc.stderr
    records = read_trace(tmp_path / "t.msgpack").records
    assert [r["compile_id"] for r in records if r.get("kind") == "probe" and r["stage"] == "myhelper"
            and r["phase"] != "unwind"] == ["export", None]
    # No graph came of it, and the report says where the export stopped (it used to say only "Nothing was
    # compiled", and the Hooks table shows _export fired 0 times: its hooks are on the return).
    import prov_trace

    why = "the call exited by an exception"
    assert prov_trace.load(tmp_path / "t.msgpack").model["not_returned"] == [
        {"stage": "source", "target": "torch.export._trace:_export", "why": why, "calls": 1}]
    report = (tmp_path / "provenance_audit.md").read_text()
    assert ("Traced calls that did not return, so the compile stopped inside them: `_export` (Source's hook), "
            f"1 call: {why}.") in report
    # The snapshot inside the failed export was said to be "taken while no compile ran".
    assert prov_trace.load(tmp_path / "t.msgpack").model["outside_compile"] == [
        {"stage": "myhelper", "target": "__main__:helper", "compile_id": "export", "snapshots": 1},
        {"stage": "myhelper", "target": "__main__:helper", "compile_id": None, "snapshots": 1}]
    assert ("Probe snapshots taken inside a compile or export that recorded no stage of the pipeline (it stopped "
            "before any did), so they belong to no graph and no rule is checked on them: `__main__:helper` "
            "(myhelper) 1 snapshot in `export`.") in report
    assert re.search(r"^  myhelper +outside .*\(\+2 taken outside any graph\)$", proc.stdout, re.M), proc.stdout
    checked = cli("check", "t.msgpack", "--require", "post_grad:stack_trace=all", cwd=tmp_path)
    assert checked.returncode == 1
    assert "the trace holds no graph: nothing was compiled (the compile stopped inside _export)" in checked.stdout


def test_with_no_report_a_probe_that_never_fired_is_still_named(tmp_path):
    """The per-stage summary is built from the report, so with --no-report a probe that did not resolve
    (a typo) or that the program never called went unmentioned: the run looked like it had watched it."""
    (tmp_path / "s.py").write_text("def used(x):\n    return x + 1\n\n\ndef unused(x):\n    return x\n\n\n"
                                   "print(used(1))\n")
    proc = cli("run", "-q", "--no-report", "-o", "t.msgpack", "--probe", "__main__:used",
               "--probe", "__main__:usde", "--probe", "__main__:unused", "s.py", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "2\n", proc.stdout + proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if "warning:" in ln]
    assert warnings == [
        f"prov-trace: warning: probe __main__:usde (usde) never fired: {tmp_path / 's.py'} (run as __main__) "
        "defines no function usde",
        "prov-trace: warning: probe __main__:unused (unused) never fired: the program did not call it",
    ], proc.stderr
    assert (tmp_path / "t.msgpack").exists() and not (tmp_path / "provenance_audit.md").exists()
