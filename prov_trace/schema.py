"""The trace stream's vocabulary: schema version, record kinds, stage names.

Shared by the writer (tracer) and the reader (report) so the two can never
disagree on a name. Documented for users in docs/trace-format.md.
"""

SCHEMA_NAME = "prov-trace"
#: (major, minor). A reader refuses a newer major; a newer minor only adds keys.
SCHEMA_VERSION = (1, 0)

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
STAGES = (SOURCE, PRE_GRAD, POST_GRAD, IR_PRE, IR_POST, KERNEL_SPEC, ARTIFACT)

STAGE_TITLES = {
    SOURCE: "Source",
    PRE_GRAD: "FX pre-grad",
    POST_GRAD: "FX post-grad",
    IR_PRE: "LoopLevelIR (pre-pass)",
    IR_POST: "LoopLevelIR (post-pass)",
    KERNEL_SPEC: "Kernel spec",
    ARTIFACT: "Artifact",
}

# Provenance fields, by the layer they live on.
FX_FIELDS = ("stack_trace", "nn_module_stack", "source_fn_stack", "original_aten", "from_node")
IR_FIELDS = ("origins", "origin_node", "traceback", "get_stack_traces")

# How the stream is packed and read: strings as str (invalid UTF-8 kept by surrogateescape), bytes as bin.
PACK_OPTIONS = dict(use_bin_type=True, unicode_errors="surrogateescape")
UNPACK_OPTIONS = dict(raw=False, strict_map_key=False, unicode_errors="surrogateescape")

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
