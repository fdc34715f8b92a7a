"""Version ranges as data, the torch gate, and the AOTInductor C++ scanner: no compile needed.

The C++ texts are cut from what torch 2.13.0's AOTInductor wrote for examples/reference_mlp.py
(INDUCTOR_PROVENANCE=1): the package's *.wrapper.cpp and *.kernel.cpp.
"""

from __future__ import annotations

import pytest

from prov_trace import torchver
from prov_trace.contract import ENTRY, Hook, Profile
from prov_trace.probes import artifact, graphs, profiles
from prov_trace.stream import schema

WRAPPER = """\
    RAIIAtenTensorHandle buf0(buf0_handle);
    // Topologically Sorted Source Nodes: [linear], Original ATen: [aten.t, aten.addmm]
    // [Provenance debug handles] aoti_torch_cpu_addmm_out:1
    static constexpr int64_t int_array_2[] = {128L, 256L};
    static constexpr int64_t int_array_3[] = {1L, 128L};
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_cpu_addmm_out(buf0, fc1_bias, arg4_1, wrap_with_raii_handle_if_needed(reinterpret_tensor_wrapper(fc1_weight, 2, int_array_2, int_array_3, 0L)), 1L, 1L));
    arg4_1.reset();
    auto buf1 = std::move(buf0);  // reuse
    // [Provenance debug handles] cpp_fused_relu_0:2
    cpp_fused_relu_0((float*)(buf1.data_ptr()));
    AtenTensorHandle buf2_handle;
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_grad_mode_set_enabled(false));
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(2, int_array_4, int_array_5, cached_torch_dtype_float32, cached_torch_device_type_cpu, this->device_idx_, &buf2_handle));
    // Topologically Sorted Source Nodes: [relu, linear_1], Original ATen: [aten.relu, aten.t, aten.addmm]
    // [Provenance debug handles] aoti_torch_cpu_addmm_out:3
    static constexpr int64_t int_array_6[] = {256L, 128L};
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_cpu_addmm_out(buf2, fc2_bias, buf1, wrap_with_raii_handle_if_needed(reinterpret_tensor_wrapper(fc2_weight, 2, int_array_6, int_array_7, 0L)), 1L, 1L));
"""

KERNEL = """\
// Triton kernels are embedded as comments in /tmp/x.wrapper.cpp

#include <torch/csrc/inductor/cpp_prefix.h>
extern "C"  void  cpp_fused_relu_0(float* in_out_ptr0)
{
}
"""



@pytest.mark.parametrize("version,spec,holds", [
    ("2.10.0+cu128", ">=2.10", True), ("2.9.1+cu128", ">=2.10", False), ("2.9.1", "<2.10", True),
    ("2.14.1", ">=2.10,<2.15", True), ("2.15.0", ">=2.10,<2.15", False), ("2.13.0+cpu", "", True),
    ("2.10.0a0+git1234", "<2.10", False), ("2.12.1", "==2.12", True), ("2.13.0", "==2.12", False),
])
def test_version_ranges(version, spec, holds):
    assert torchver.in_range(version, spec) is holds


def test_a_bad_range_is_refused_when_the_hook_is_written():
    with pytest.raises(ValueError, match="not a torch version range"):
        Hook("x", "m:f", ENTRY, lambda c: {}, torch="~=2.13")


def _targets(profile: Profile, version: str) -> list[str]:
    return [h.target.rsplit(":", 1)[1] for h in profile.hooks_for(version)]


@pytest.mark.parametrize("name", ["inductor-cpu", "inductor-triton"])
def test_a_fake_torch_version_chooses_the_targets_of_its_range(name):
    prof = profiles.get(name)
    aot = ["_aot_stage2b_compile_forward_or_inference", "_aot_stage2b_bw_compile"]
    for version in ("2.10.0", "2.13.0+cu130", "2.14.1", "2.20.0"):
        chosen = _targets(prof, version)
        assert all(a in chosen for a in aot) and "OutputGraph._call_user_compiler" in chosen, version
        assert len(chosen) == len(prof.hooks)
    older = _targets(prof, "2.9.1+cu128")
    assert not any(a in older for a in aot)  # AOT's stage-2b functions are new in 2.10
    assert "OutputGraph._call_user_compiler" in older and "_compile" in older
    assert len(older) == len(prof.hooks) - 2
    assert _targets(prof, "") == [h.target.rsplit(":", 1)[1] for h in prof.hooks]  # unknown: every hook


def test_a_moved_target_is_two_hooks_with_disjoint_ranges():
    prof = Profile("p", "", (Hook("s", "m:old_place", ENTRY, lambda c: {}, torch="<2.12"),
                             Hook("s", "m:new_place", ENTRY, lambda c: {}, torch=">=2.12")))
    assert _targets(prof, "2.11.0") == ["old_place"]
    assert _targets(prof, "2.12.1") == ["new_place"]


def test_the_installed_version_is_read_without_importing_torch(monkeypatch):
    import sys
    from importlib import metadata

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    got = torchver.installed()
    assert got is not None and got.split("+")[0] == metadata.version("torch").split("+")[0]
    assert "torch" not in sys.modules
    # Where torch/version.py cannot be read, the package metadata says.
    monkeypatch.setattr(torchver, "_from_source", lambda: None)
    monkeypatch.setattr(metadata, "version", lambda dist: "2.11.0" if dist == "torch" else "0")
    assert torchver.installed() == "2.11.0"
    assert "torch" not in sys.modules


@pytest.mark.parametrize("version,code,says", [
    ("2.9.1+cu128", 2, "older than 2.10.0"), ("2.8.0", 2, "older than 2.10.0"), ("2.10.0+cu128", 0, None),
    ("2.13.0+cpu", 0, None), ("2.14.1", 0, None), ("2.14.1+cu130", 0, None), ("2.15.0", 0, "newer than 2.14.1"),
    ("2.15.0.dev20261201", 0, "newer than 2.14.1"), (None, 0, None),
])
def test_torch_gate(version, code, says):
    got_code, msg = torchver.gate(version)
    assert got_code == code
    assert (msg is None) if says is None else (says in msg and "\n" not in msg)
    if code == 2:
        assert msg.count(". ") == 0 and "upgrade torch" in msg  # one sentence, saying what to do
    if says and code == 0:
        assert msg.startswith("warning:") and "prov-trace targets" in msg


def test_cpp_wrapper_scan_finds_each_kernel_and_its_comments():
    ks = {k["kernel"]: k for k in artifact.scan_cpp_source(WRAPPER)}
    assert set(ks) == {"aoti_torch_cpu_addmm_out", "cpp_fused_relu_0"}  # empty_strided and grad_mode_set_enabled are no kernels
    addmm = ks["aoti_torch_cpu_addmm_out"]
    assert addmm["kind"] == "extern" and [c["line"] for c in addmm["calls"]] == [6, 17]
    assert addmm["provenance_comments"] == [
        "// Topologically Sorted Source Nodes: [linear], Original ATen: [aten.t, aten.addmm]",
        "// [Provenance debug handles] aoti_torch_cpu_addmm_out:1",
        "// Topologically Sorted Source Nodes: [relu, linear_1], Original ATen: [aten.relu, aten.t, aten.addmm]",
        "// [Provenance debug handles] aoti_torch_cpu_addmm_out:3"]
    # The C++ kernel carries only a debug handle: no source node names.
    assert ks["cpp_fused_relu_0"]["provenance_comments"] == ["// [Provenance debug handles] cpp_fused_relu_0:2"]


def test_cpp_kernel_file_scan_finds_the_definition():
    (k,) = artifact.scan_cpp_source(KERNEL)
    assert (k["kernel"], k["kind"], k["def_line"], k["provenance_comments"]) == ("cpp_fused_relu_0", "generated", 4, [])


def test_aoti_artifact_merges_the_wrapper_and_kernel_files(tmp_path):
    from prov_trace.contract import RETURN, ProbeCall

    w, k = tmp_path / "x.wrapper.cpp", tmp_path / "y.kernel.cpp"
    w.write_text(WRAPPER)
    k.write_text(KERNEL)
    p = graphs.probe_aoti_artifact(ProbeCall(RETURN, {}, retval=[str(w), str(k), str(tmp_path / "x.wrapper.so")]))
    assert p["path"] == str(w) and len(p["files"]) == 3
    ks = {x["kernel"]: x for x in p["kernels"]}
    assert ks["cpp_fused_relu_0"]["def_line"] == 4 and ks["cpp_fused_relu_0"]["file"] == str(k)
    assert ks["cpp_fused_relu_0"]["provenance_comments"] == ["// [Provenance debug handles] cpp_fused_relu_0:2"]


def test_the_new_stages_sit_in_compile_order():
    order = list(schema.STAGES)
    assert order.index(schema.SOURCE) < order.index(schema.DYNAMO_GRAPH) < order.index(schema.PRE_GRAD) \
        < order.index(schema.AOT_GRAPH) < order.index(schema.POST_GRAD)


FAKE_TORCH = """\
import sys
import prov_trace.torchver as tv
tv.installed = lambda: {version!r}
sys.argv = ["prov-trace", "run", "-o", "t.msgpack", "--report", "r.md", "s.py"]
from prov_trace.cli import main
main()
"""


@pytest.mark.parametrize("version", ["2.9.1+cu128", "2.15.0"])
def test_run_checks_the_installed_torch_before_tracing(tmp_path, version):
    """`prov-trace run` with the installed torch version faked (torch is not imported before the check)."""
    import os
    import subprocess
    import sys

    (tmp_path / "s.py").write_text("print('script ran')\n")
    proc = subprocess.run([sys.executable, "-c", FAKE_TORCH.format(version=version)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if version.startswith("2.9"):
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.splitlines() == [
            "prov-trace: error: torch 2.9.1+cu128 is older than 2.10.0, the oldest release prov-trace supports: "
            "upgrade torch (pip install 'torch>=2.10.0')"]
        assert not (tmp_path / "t.msgpack").exists()  # nothing traced
    else:
        assert proc.returncode == 0, proc.stderr
        warnings = [ln for ln in proc.stderr.splitlines() if "newer than" in ln]
        assert warnings == ["prov-trace: warning: torch 2.15.0 is newer than 2.14.1, the newest release prov-trace "
                            "was tested on; `prov-trace targets` checks that every hook still resolves"]
        assert "script ran" in proc.stdout and (tmp_path / "t.msgpack").exists()


def test_targets_checks_only_the_hooks_for_the_installed_torch(tmp_path):
    """`prov-trace targets` with torch 2.9.1 faked: the AOT-graph hooks (torch >=2.10) are named, not checked."""
    import json
    import os
    import subprocess
    import sys

    code = FAKE_TORCH.format(version="2.9.1").replace(
        '["prov-trace", "run", "-o", "t.msgpack", "--report", "r.md", "s.py"]',
        '["prov-trace", "targets", "--profile", "inductor-cpu", "--json"]')
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out = json.loads(proc.stdout)
    assert out["torch"] == "2.9.1"
    assert [o["target"].rsplit(":", 1)[1] for o in out["other_releases"]] == [
        "_aot_stage2b_compile_forward_or_inference", "_aot_stage2b_bw_compile"]
    assert {o["torch_range"] for o in out["other_releases"]} == {">=2.10"}
    assert len(out["targets"]) == len(profiles.get("inductor-cpu").hooks) - 2
