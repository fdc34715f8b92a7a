"""The trace stream's vocabulary: schema version, record kinds, stage names.

Shared by the writer (tracer) and the reader (report) so the two can never
disagree on a name. Documented for users in docs/trace-format.md.
"""

import re

SCHEMA_NAME = "prov-trace"
#: (major, minor). A reader refuses a newer major; a newer minor only adds keys.
SCHEMA_VERSION = (1, 3)

# Record kinds, the value of each record's "kind" key.
HEADER = "header"
PROBE = "probe"
ERROR = "error"
HOOK = "hook"
NOTE = "note"
END = "end"
RECORD_KINDS = (HEADER, PROBE, ERROR, HOOK, NOTE, END)

# The pipeline's stages, in order. A profile maps targets onto these names;
# a user probe may add its own stage name, which sorts after these.
SOURCE = "source"
PRE_GRAD = "pre_grad"
POST_GRAD = "post_grad"
IR_PRE = "ir_pre"
IR_POST = "ir_post"
KERNEL_SPEC = "kernel_spec"
ARTIFACT = "artifact"
#: The FX graphs every path through torch.compile or torch.export has, whatever its backend: the graph
#: torch.export produced, the graph Dynamo hands to the backend, AOT autograd's forward/backward graphs.
EXPORT_GRAPH = "export_graph"
DYNAMO_GRAPH = "dynamo_graph"
AOT_GRAPH = "aot_graph"
#: In the order a compile reaches them. Inductor's pre-grad passes run on the Dynamo graph before AOT
#: autograd traces it, so the AOT graph comes after FX pre-grad and before FX post-grad. A strict
#: torch.export runs Dynamo first and exports the graph Dynamo took, so the Dynamo graph comes before
#: the Export graph (the other paths have one of the two).
STAGES = (SOURCE, DYNAMO_GRAPH, EXPORT_GRAPH, PRE_GRAD, AOT_GRAPH, POST_GRAD, IR_PRE, IR_POST, KERNEL_SPEC, ARTIFACT)
#: Stages a report shows only when the trace has a record of them: one path has each (export, a
#: torch.compile, an aot_autograd backend), and a trace written before they existed has none.
PATH_STAGES = (DYNAMO_GRAPH, EXPORT_GRAPH, AOT_GRAPH)
#: The stages whose objects are FX nodes (read by probes/fx.py).
FX_STAGES = (DYNAMO_GRAPH, EXPORT_GRAPH, PRE_GRAD, AOT_GRAPH, POST_GRAD)
#: The stages only Inductor's compile reaches: with another backend they are off the compile's path.
INDUCTOR_STAGES = (PRE_GRAD, POST_GRAD, IR_PRE, IR_POST, KERNEL_SPEC, ARTIFACT)

#: Not a pipeline stage: the exception a compile raised, read where Dynamo handles it. The report attaches
#: it to where that compile stopped; it is no column, and no user probe's.
COMPILE_ERROR = "compile_error"
#: Not a pipeline stage either: a graph break, as Dynamo hands it to the code that ends the graph there. The
#: Dynamo graph's record holds the same break when a graph was compiled; this one also covers a frame whose
#: graph was empty at the break (two breaks in a row), which no backend sees.
GRAPH_BREAK = "graph_break"
#: Not a pipeline stage: something the tracer's own settings did to the program, said as it happens (a cache
#: artifact torch did not record because prov-trace turned the caches off).
NOTICE = "notice"
#: Stages of records that are neither a pipeline stage nor a user probe's.
SIDE_STAGES = (COMPILE_ERROR, GRAPH_BREAK, NOTICE)

STAGE_TITLES = {
    SOURCE: "Source",
    EXPORT_GRAPH: "Export graph",
    DYNAMO_GRAPH: "Dynamo graph",
    AOT_GRAPH: "AOT graph",
    PRE_GRAD: "FX pre-grad",
    POST_GRAD: "FX post-grad",
    IR_PRE: "LoopLevelIR (pre-pass)",
    IR_POST: "LoopLevelIR (post-pass)",
    KERNEL_SPEC: "Kernel spec",
    ARTIFACT: "Artifact",
    COMPILE_ERROR: "Compile error",
    GRAPH_BREAK: "Graph break",
    NOTICE: "Notice",
}

# Provenance fields, by the layer they live on.
FX_FIELDS = ("stack_trace", "nn_module_stack", "source_fn_stack", "original_aten", "from_node")
IR_FIELDS = ("origins", "origin_node", "traceback", "get_stack_traces")

#: Comment lines in Inductor's generated code that carry provenance (as Inductor 2.13 writes them):
#: the artifact probe keeps them, and the report counts a kernel's comments that hold one.
PROVENANCE_MARKERS = (
    "Topologically Sorted Source Nodes",
    "Original ATen",
    "Source node to ATen node mapping",
    "[Provenance debug handles]",
    "Graph fragment",
)


def is_provenance_comment(line: str) -> bool:
    return any(marker in line for marker in PROVENANCE_MARKERS)


_NAMES_NOTHING = re.compile(r"(?:#|//)\s*Topologically Sorted Source Nodes: \[\s*\], Original ATen: \[\s*\]\s*")


def names_nothing(comment: str) -> bool:
    """A provenance comment with nothing in it: Inductor writes `# Topologically Sorted Source Nodes: [],
    Original ATen: []` (`//` in C++) above a call it made for no node of the graph (the random seeds'
    `aten.randint`)."""
    return _NAMES_NOTHING.fullmatch(comment.strip()) is not None


# How the stream is packed and read: strings as str (invalid UTF-8 kept by surrogateescape), bytes as bin.
PACK_OPTIONS = dict(use_bin_type=True, unicode_errors="surrogateescape")
UNPACK_OPTIONS = dict(raw=False, strict_map_key=False, unicode_errors="surrogateescape")

#: How many input names an FX node's snapshot keeps (docs/trace-format.md); past it the rest are counted in
#: `cut_inputs`, so a node with this many names may have had more.
MAX_FX_INPUTS = 256

#: How deeply maps and lists may nest in a record a reader keeps whole. What prov-trace writes stays well
#: under it (a from_node tree is cut at depth 32, about 75 levels from the record); a deeper part is read
#: as null and counted (stream/conform.py), so nothing that walks a record recurses past Python's limit.
MAX_NESTING = 128

# What a reader accepts (msgpack.Unpacker limits). The writer checks big records against
# the same limits, so it never writes a record the reader would refuse.
MAX_RECORD_BYTES = 256 * 1024 * 1024
READ_LIMITS = dict(
    max_buffer_size=MAX_RECORD_BYTES,
    max_str_len=64 * 1024 * 1024,
    max_bin_len=64 * 1024 * 1024,
    max_array_len=4 * 1024 * 1024,
    max_map_len=1024 * 1024,
    max_ext_len=1024,
)
