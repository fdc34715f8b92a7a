"""The old way against the new: a monkey-patching capture of the same probes sees the same field data.

bench/patch_capture.py replaces every binding of each target function with a
wrapper (what the torch-spyre audit did with six classes). Its trace of the
reference MLP must hold the same probe records, in the same order and with the
same payloads, as the sys.monitoring trace of the same compile (the `mlp_run`
fixture), once process-specific values are normalised.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import msgpack
import pytest

from conftest import EXAMPLES, REPO
from trace_compare import differences, normalised

pytestmark = pytest.mark.compile

SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    sys.path[:0] = [{bench!r}, {examples!r}]
    import torch
    from patch_capture import PatchCapture
    from prov_trace.probes.profiles import INDUCTOR_CPU
    from prov_trace.stream.writer import TraceWriter
    from reference_mlp import SimpleMLP

    torch.compiler.config.force_disable_caches = True
    import dataclasses
    # torch.export's hooks: its module is not imported by a torch.compile, so nothing binds them to patch.
    profile = dataclasses.replace(INDUCTOR_CPU, hooks=tuple(h for h in INDUCTOR_CPU.hooks
                                                         if not h.target.startswith("torch.export.")))
    model = SimpleMLP().eval()
    with PatchCapture(TraceWriter(sys.argv[1]), profile) as cap:
        with torch.no_grad():
            torch.compile(model)(torch.randn(2, 128))
    assert not cap.missed, cap.missed
""")


def _probes(path):
    with open(path, "rb") as f:
        return [r for r in msgpack.Unpacker(f, raw=False) if r["kind"] == "probe"]


@pytest.fixture(scope="module")
def patched_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("patched")
    script = d / "capture.py"
    script.write_text(SCRIPT.format(bench=str(REPO / "bench"), examples=str(EXAMPLES)))
    subprocess.run([sys.executable, str(script), str(d / "t.msgpack")], check=True, cwd=d,
                   capture_output=True, text=True)
    return _probes(d / "t.msgpack")


def test_patch_capture_and_monitoring_see_the_same_field_data(patched_trace, mlp_run):
    ours = normalised(_probes(mlp_run.trace))
    theirs = normalised(patched_trace)
    assert [(r["stage"], r["phase"], r["compile_id"], r["graph"]) for r in ours] == \
        [(r["stage"], r["phase"], r["compile_id"], r["graph"]) for r in theirs]
    problems = [f"record {i} ({a['stage']}){d}" for i, (a, b) in enumerate(zip(ours, theirs))
                for d in differences(a.get("payload"), b.get("payload"))]
    assert not problems, "\n".join(problems[:40])
