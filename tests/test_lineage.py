"""Lineage on the reference MLP's real trace, and the rules behind it on hand-made stages."""

from __future__ import annotations

import re

from prov_trace.stream import schema as S
from prov_trace.report import lineage
from prov_trace.report.markdown import mermaid, mermaid_label, render


def _edges(lin, via=None):
    return {(e["from"], e["to"]) for e in lin["edges"] if via is None or e["via"] == via}


def _src(g, text):
    row = next(r for r in g["survival"] if r["text"] == text)
    return f"source:{row['file']}:{row['line']}"


def test_linear_decomposes_into_permute_and_addmm(mlp_run):
    g = mlp_run.model()["graphs"][0]
    lin = g["lineage"]
    # On CPU inference the fc1 linear (pre-grad node `x`) lowers to permute + addmm, by from_node.
    assert {t for f, t in _edges(lin, "from_node") if f == "pre_grad:x"} == {"post_grad:permute", "post_grad:addmm"}
    assert {t for f, t in _edges(lin, "from_node") if f == "pre_grad:x_2"} == {"post_grad:permute_1", "post_grad:addmm_1"}
    assert {"from": "pre_grad:x", "to": ["post_grad:permute", "post_grad:addmm"], "stage": "post_grad"} in lin["decompositions"]
    # The from_node edges are exactly Inductor's own pre-grad -> post-grad mapping.
    from_mapping = {(f"pre_grad:{pre}", f"post_grad:{post}") for pre, posts in g["mappings"]["pre_to_post"].items() for post in posts}
    assert _edges(lin, "from_node") == from_mapping


def test_every_stage_links_to_the_next(mlp_run):
    g = mlp_run.model()["graphs"][0]
    lin = g["lineage"]
    assert lin["stages"] == list(lineage.STAGES)
    assert (_src(g, "x = self.fc1(x)"), "pre_grad:x") in _edges(lin, "source")
    assert (_src(g, "x = torch.relu(x)"), "pre_grad:x_1") in _edges(lin, "source")
    # The extern addmm buffer is addmm's value (origin_node); the permute is only also in its origins.
    assert {f for f, t in _edges(lin, "origin_node") if t == "ir_pre:buf0"} == {"post_grad:addmm"}
    assert {f for f, t in _edges(lin, "also_in_origins") if t == "ir_pre:buf0"} == {"post_grad:permute"}
    assert not lin["fusions"]  # no kernel holds more than one IR op
    assert _edges(lin, "name") >= {("ir_pre:buf0", "ir_post:buf0"), ("ir_pre:buf1", "ir_post:buf1"), ("ir_pre:buf2", "ir_post:buf2")}
    assert _edges(lin, "member") == {("ir_post:buf0", "kernel_spec:extern_kernels.addmm"),
                                     ("ir_post:buf1", "kernel_spec:cpp_fused_relu_0"),
                                     ("ir_post:buf2", "kernel_spec:extern_kernels.addmm #2")}
    assert ("kernel_spec:cpp_fused_relu_0", "artifact:cpp_fused_relu_0") in _edges(lin, "name")
    # Placeholders and outputs are graph boundaries, not ops.
    assert not [n for n in lin["nodes"] if n["kind"] in ("placeholder", "output")]
    assert not [n for n in lin["nodes"] if n["inherited"]]


def test_a_source_line_reaches_its_kernel_and_artifact(mlp_run):
    g = mlp_run.model()["graphs"][0]
    down = lineage.reach(g["lineage"], _src(g, "x = torch.relu(x)"))
    assert down[0] == _src(g, "x = torch.relu(x)")
    assert {"pre_grad:x_1", "post_grad:relu", "ir_pre:buf1", "ir_post:buf1", "kernel_spec:cpp_fused_relu_0",
            "artifact:cpp_fused_relu_0"} <= set(down)
    # relu is in buf2's origins only as an input Inductor realised: a side link, not where relu flows.
    assert "ir_pre:buf2" not in down
    assert lineage.reach(g["lineage"], _src(g, "return x")) == [_src(g, "return x")]


def test_markdown_has_a_mermaid_flowchart_per_graph(mlp_run):
    model = mlp_run.model()
    text = render(model)
    assert "### Lineage" in text and "### Provenance survival per source line" in text
    block = re.search(r"```mermaid\n(.*?)```", text, re.S).group(1)
    assert block.startswith("flowchart LR\n")
    titles = re.findall(r'^  subgraph s\d+\["([^"]*)"\]$', block, re.M)
    assert titles == [model["stage_titles"][st] for st in lineage.STAGES]
    labels = dict(re.findall(r'^    (n\d+)\["([^"]*)"\]$', block, re.M))
    edges = {(labels[a], via, labels[b]) for a, via, b in re.findall(r"^  (n\d+) -\.?->\|([\w ]+)\| (n\d+)$", block, re.M)}
    assert ("x", "from node", "permute") in edges and ("x", "from node", "addmm") in edges
    assert ("relu", "also in origins", "buf2") in edges
    assert ("buf1", "member", "cpp_fused_relu_0") in edges
    assert len(edges) == len(model["graphs"][0]["lineage"]["edges"])
    assert "| decomposition | `x` (FX pre-grad) |" in text


def test_mermaid_labels_are_inert():
    assert mermaid_label('a "b" <script>&#x` #quot;') == '"a #quot;b#quot; #lt;script#gt;#amp;#35;x#96; #35;quot;"'
    lin = {"stages": ["source"], "edges": [],
           "nodes": [{"id": "source:f:1", "stage": "source", "label": 'f:1 print("]) end\n<b>")', "inherited": False}]}
    out = mermaid(lin, {"source": "Source"})
    node_line = next(ln for ln in out if ln.startswith("    n0"))
    assert node_line == '    n0["f:1 print(#quot;]) end #lt;b#gt;#quot;)"]'
    assert out[0] == "```mermaid" and out[-1] == "```"


def _stage(objs):
    return {"observed": True, "objects": objs, "records": 1}


def test_inherited_ops_link_to_their_source_bearing_producers():
    L1 = {"file": "m.py", "line": 1, "text": "y = f(x)"}
    stages = {
        S.PRE_GRAD: _stage([{"name": "y", "kind": "call_function", "inputs": [], "sources": [L1], "graph_id": 1, "from_node": []}]),
        S.POST_GRAD: _stage([
            {"name": "a", "kind": "call_function", "inputs": [], "sources": [L1], "graph_id": 2,
             "from_node": [{"name": "y", "graph_id": 1}]},
            # No source and no from_node of its own: a node a pass synthesised.
            {"name": "b", "kind": "call_function", "inputs": ["c"], "sources": [], "graph_id": 2, "from_node": []},
            {"name": "c", "kind": "call_function", "inputs": ["a"], "sources": [], "graph_id": 2, "from_node": []},
        ]),
        S.IR_PRE: _stage([{"name": "buf0", "kind": "ComputedBuffer", "origins": ["a"], "reads": [], "sources": [L1]}]),
        S.IR_POST: _stage([
            {"name": "buf0", "kind": "ComputedBuffer", "origins": ["a"], "reads": [], "sources": [L1]},
            {"name": "buf1", "kind": "Restickify", "origins": [], "reads": ["buf0"], "sources": []},
        ]),
        S.KERNEL_SPEC: _stage([{"name": "k0", "kind": "generated", "ops": ["buf0", "buf1"], "sources": [L1]}]),
    }
    survival = [{"file": "m.py", "line": 1, "text": "y = f(x)"}]
    lin = lineage.build(stages, survival)
    nodes = {n["id"]: n for n in lin["nodes"]}
    # c and b inherit from a, their nearest source-bearing producer (b through c); buf1 from buf0, which it reads.
    assert nodes["post_grad:c"]["inherited"] and nodes["post_grad:c"]["inherits_from"] == ["post_grad:a"]
    assert nodes["post_grad:b"]["inherited"] and nodes["post_grad:b"]["inherits_from"] == ["post_grad:a"]
    assert nodes["ir_post:buf1"]["inherited"] and nodes["ir_post:buf1"]["inherits_from"] == ["ir_post:buf0"]
    assert ("ir_post:buf0", "ir_post:buf1") in _edges(lin, "inherited")
    assert not nodes["post_grad:a"]["inherited"]
    # Two IR ops in one kernel: a fusion.
    assert any(f["to"] == "kernel_spec:k0" and set(f["from"]) == {"ir_post:buf0", "ir_post:buf1"} for f in lin["fusions"])
    # A line's flow is what carries it; the inherited nodes (no source of their own) are drawn, dashed, apart.
    inherited = {"post_grad:b", "post_grad:c", "ir_post:buf1"}
    assert set(lineage.reach(lin, "source:m.py:1")) == set(nodes) - inherited
    # The Markdown names the inherited link.
    assert "(inherited)" in "\n".join(mermaid(lin, {}))


def test_unobserved_ir_post_links_kernels_to_ir_pre():
    stages = {
        S.IR_PRE: _stage([{"name": "buf0", "kind": "ComputedBuffer", "origins": [], "reads": [], "sources": []}]),
        S.IR_POST: {"observed": False, "objects": [], "records": 0},
        S.KERNEL_SPEC: _stage([{"name": "k", "kind": "generated", "ops": ["buf0"], "sources": []}]),
        S.ARTIFACT: _stage([{"name": "k", "kind": "generated", "sources": []}]),
    }
    lin = lineage.build(stages, [])
    assert _edges(lin) == {("ir_pre:buf0", "kernel_spec:k"), ("kernel_spec:k", "artifact:k")}
    assert lin["stages"] == [S.IR_PRE, S.KERNEL_SPEC, S.ARTIFACT]


def test_an_ir_op_reads_its_origins_graphs_whatever_the_trace_holds():
    """The IR payload's `origin_graph` and an op's `origins.graphs` / `origin_node.graph` (docs/trace-format.md):
    an op names its origins' graphs only where one is not the payload's; a value of the wrong shape (a
    hand-edited or damaged trace) reads as no graph, never as an error."""
    from prov_trace.report.objects import ir_objects

    def op(name, origins, graphs=None, node=None, node_graph=None):
        fields = {"origins": {"value": origins, **({"graphs": graphs} if graphs is not None else {})},
                  "origin_node": {"value": node, **({"graph": node_graph} if node_graph is not None else {})}}
        return {"name": name, "fields": fields}

    records = [{"payload": {"origin_graph": 7, "ops": [
        op("buf0", ["add", "mul"], node="add"),                        # both in graph 7
        op("true_buf0", ["cond", "mul"], [7, 9], "mul", 9),            # a branch's op: its mul is graph 9's
        op("bad", ["x"], "not a list", "x", [1]),                      # damaged: no graph
    ]}}, {"payload": {"origin_graph": [1], "ops": [op("old", ["a"], node="a")]}}]
    objs = {o["name"]: o for o in ir_objects(records, []).objects}
    assert (objs["buf0"]["origin_graphs"], objs["buf0"]["origin_node_graph"]) == ([7, 7], 7)
    assert (objs["true_buf0"]["origin_graphs"], objs["true_buf0"]["origin_node_graph"]) == ([7, 9], 9)
    assert (objs["bad"]["origin_graphs"], objs["bad"]["origin_node_graph"]) == ([7], None)
    assert (objs["old"]["origin_graphs"], objs["old"]["origin_node_graph"]) == ([None], None)
