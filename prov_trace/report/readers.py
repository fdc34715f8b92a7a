"""Which reader turns a probe record into stage objects: chosen by data, not by branches.

The payload's ``shape`` names its reader when the probe wrote one (torch-spyre's
probes do); otherwise the stage's default shape does, and a user probe's stage
is read generically. A backend that adds a payload shape adds its readers to
``READERS`` from its own module (``report/spyre.py``), and nothing else changes.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from prov_trace.report import objects as O
from prov_trace.report import spyre
from prov_trace.stream import schema as S

#: Payload shape -> reader.
READERS: dict[str, O.Reader] = {
    "source": O.source_objects,
    "fx": O.fx_objects,
    "ir": O.ir_objects,
    "kernel": O.kernel_objects,
    "artifact": O.artifact_objects,
    "generic": O.generic_objects,
    **spyre.READERS,
}
#: The shape a stage's payloads have when the probe names none.
STAGE_SHAPES = {
    S.SOURCE: "source", S.EXPORT_GRAPH: "fx", S.DYNAMO_GRAPH: "fx", S.AOT_GRAPH: "fx", S.PRE_GRAD: "fx", S.POST_GRAD: "fx", S.IR_PRE: "ir", S.IR_POST: "ir",
    S.KERNEL_SPEC: "kernel", S.ARTIFACT: "artifact",
}


def shape_of(stage: str, record: dict[str, Any]) -> str:
    payload = record.get("payload")
    shape = payload.get("shape") if isinstance(payload, dict) else None
    if isinstance(shape, str) and shape in READERS:
        return shape
    return STAGE_SHAPES.get(stage, "generic")


def read_stage(stage: str, records: list[dict[str, Any]]) -> O.Read:
    """All of a stage's objects: its records grouped by shape, each group read by its reader, in record order."""
    groups: "OrderedDict[str, list[dict[str, Any]]]" = OrderedDict()
    for rec in records:
        groups.setdefault(shape_of(stage, rec), []).append(rec)
    out = O.Read()
    for shape, recs in groups.items():
        read = READERS[shape](recs, records)
        out.objects.extend(read.objects)
        out.files.extend(f for f in read.files if f not in out.files)
        out.library.extend(f for f in read.library if f not in out.library)
    return out
