"""``activate()``: make a torch-spyre source tree importable and compilable in this process.

With the tree's own compiled ``torch_spyre._C`` importable, that is used and nothing is
replaced. Without it, the CPU stand-in takes its place: ``sys.modules["torch_spyre._C"]``
is the stand-in module, the "spyre" device keeps tensors in host memory, runtime calls are
recorded, and ``dxp_standalone`` is a stand-in that accepts each bundle. Nothing happens
until ``activate()`` is called: importing prov-trace changes nothing.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.machinery
import importlib.util
import json
import os
import shlex
import shutil
import stat
import sys
import tempfile
import threading
from typing import Any

from . import pyi
from .dxp_standin import LOG_ENV
from .errors import KernelNotRun, NotATorchSpyreTree, StandInError, StandInMismatch, StandInUnavailable

STANDIN_LINE = "Spyre CPU stand-in: compile path real, kernels not run"
MODULE_NAME = "torch_spyre._C"

_lock = threading.Lock()
_active: "StandIn | None" = None


class StandIn:
    """What ``activate()`` installed, and what the device side was asked since.

    ``mode`` is ``"stand-in"`` or ``"real"``; ``description`` says which in one line.
    """

    KernelNotRun = KernelNotRun

    def __init__(self, mode: str, tree: str, package_dir: str, description: str, launch: str,
                 state: Any = None, dxp_dir: str | None = None, not_provided: dict[str, str] | None = None,
                 native_library: str | None = None) -> None:
        self.mode = mode
        self.tree = tree
        self.package_dir = package_dir
        self.description = description
        self.launch = launch
        self._state = state
        self.dxp_dir = dxp_dir
        self.not_provided = dict(not_provided or {})
        self.native_library = native_library

    @property
    def is_standin(self) -> bool:
        return self.mode == "stand-in"

    @property
    def dxp_log(self) -> str | None:
        return os.path.join(self.dxp_dir, "dxp_standalone.jsonl") if self.dxp_dir else None

    def calls(self, name: str | None = None) -> list[dict[str, Any]]:
        """Recorded device-side calls (all, or those named `name`), oldest first. Empty in real mode."""
        if self._state is None:
            return []
        snap = self._state.recorder.snapshot()["calls"]
        return [c for c in snap if name is None or c["call"] == name]

    def counts(self) -> dict[str, int]:
        return {} if self._state is None else self._state.recorder.snapshot()["counts"]

    def dxp_calls(self) -> list[dict[str, Any]]:
        """Each ``dxp_standalone`` run: the bundle directory, its ``sdsc_*.json`` files, accepted or why not."""
        path = self.dxp_log
        if not path or not os.path.isfile(path):
            return []
        out = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        continue
        return out

    def kernel_provenance(self) -> list[dict[str, Any]]:
        """torch-spyre's own kernel -> debug-handle record, one entry per ``register_kernel_provenance`` call.

        Each entry: ``event_base_name``, ``key``, ``debug_handle_ids``, ``accepted``, and the bundle
        directory (``code_dir``) of the kernel it was registered for, joined through the
        ``prepare_kernel(..., profiler_name=event_base_name)`` call that follows it.
        """
        prepared: dict[str, list[str]] = {}
        for call in self.calls("prepare_kernel"):
            if call.get("profiler_name"):
                prepared.setdefault(call["profiler_name"], []).append(call["code_dir"])
        out = []
        for call in self.calls("register_kernel_provenance"):
            dirs = prepared.get(call["event_base_name"], [])
            out.append({k: call.get(k) for k in ("event_base_name", "key", "debug_handle_ids", "accepted")}
                       | {"code_dirs": dirs})
        return out

    def check_kernels_run(self) -> None:
        """With ``launch="defer"``: raise ``KernelNotRun`` naming every kernel launched and not run."""
        if self._state is not None:
            self._state.launcher.check()

    def summary(self) -> dict[str, Any]:
        return {"mode": self.mode, "description": self.description, "tree": self.tree, "launch": self.launch,
                "not_provided": self.not_provided, "native_library": self.native_library,
                "counts": self.counts(), "dxp_calls": len(self.dxp_calls())}

    def __repr__(self) -> str:
        return f"<StandIn {self.mode}: {self.description}>"


def find_tree(torch_spyre_dir: str | os.PathLike | None) -> tuple[str, str]:
    """(the directory to put on sys.path, the torch_spyre package directory), or NotATorchSpyreTree."""
    if torch_spyre_dir is None:
        try:
            spec = importlib.util.find_spec("torch_spyre")
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            raise NotATorchSpyreTree("No torch-spyre tree was given and torch_spyre cannot be imported here.")
        package = os.path.abspath(list(spec.submodule_search_locations)[0])
        root = os.path.dirname(package)
    else:
        if not os.fspath(torch_spyre_dir):
            raise NotATorchSpyreTree("the torch-spyre tree given is an empty path: give the directory that holds "
                                     "torch_spyre/.")
        given = os.path.abspath(os.fspath(torch_spyre_dir))
        if os.path.exists(given) and not os.path.isdir(given):
            raise NotATorchSpyreTree(f"{torch_spyre_dir} is not a torch-spyre source tree: it is a file; give the "
                                     "directory that holds torch_spyre/.")
        if not os.path.isdir(given):
            raise NotATorchSpyreTree(f"{torch_spyre_dir} is not a torch-spyre source tree: there is no such directory.")
        if os.path.basename(given) == "torch_spyre" and os.path.isfile(os.path.join(given, "__init__.py")):
            root, package = os.path.dirname(given), given
        else:
            root, package = given, os.path.join(given, "torch_spyre")
    if not os.path.isfile(os.path.join(package, "__init__.py")) or not os.path.isfile(os.path.join(package, "_C.pyi")):
        where = torch_spyre_dir if torch_spyre_dir is not None else root
        raise NotATorchSpyreTree(
            f"{where} is not a torch-spyre source tree: it has no torch_spyre package with a _C.pyi in it."
        )
    return root, package


def _real_extension(package: str) -> str | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(package, "_C" + suffix)
        if os.path.isfile(path):
            return path
    return None


def _imported_from(module: Any) -> str | None:
    path = getattr(module, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) if path else None


def activate(torch_spyre_dir: str | os.PathLike | None = None, *, launch: str = "raise") -> StandIn:
    """Make the torch-spyre tree at `torch_spyre_dir` importable here, with the stand-in if it needs one.

    `torch_spyre_dir` is the tree's root (holding ``torch_spyre/``) or the package directory
    itself; None means the torch_spyre this interpreter can already import. `launch` says
    what launching a compiled kernel does under the stand-in: ``"raise"`` raises
    ``KernelNotRun`` at the first launch; ``"defer"`` records it, leaves the kernel's outputs
    as zeros, and lets ``StandIn.check_kernels_run()`` raise once the caller is done (so a
    model with graph breaks compiles every graph before the error).

    Calling it again with the same tree returns the same ``StandIn``.
    """
    global _active
    if launch not in ("raise", "defer"):
        raise ValueError(f"launch must be 'raise' or 'defer', not {launch!r}")
    root, package = find_tree(torch_spyre_dir)
    with _lock:
        if _active is not None:
            if os.path.samefile(_active.package_dir, package):
                return _active
            raise StandInError(
                f"torch-spyre from {_active.package_dir} is already active in this process; "
                f"one process can hold one torch-spyre, so {package} cannot be activated too."
            )
        loaded = sys.modules.get("torch_spyre")
        if loaded is not None:
            where = _imported_from(loaded)
            if where is None or not os.path.samefile(where, package):
                raise StandInError(
                    f"torch_spyre is already imported here from {where}; activate {where} instead, or call "
                    "activate() before anything imports torch_spyre."
                )
        present = sys.modules.get(MODULE_NAME)
        real_failure = None
        if present is not None and not _is_standin(present):
            _active = _finish_real(root, package, present, launch)
            return _active
        if present is None and _real_extension(package):
            _put_on_path(root)
            try:
                real = importlib.import_module(MODULE_NAME)
            except Exception as exc:  # noqa: BLE001 - reported in the description, then the stand-in is used
                real_failure = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                sys.modules.pop(MODULE_NAME, None)
            else:
                _active = _finish_real(root, package, real, launch)
                return _active
        _active = _install(root, package, launch, real_failure)
        return _active


def _is_standin(module: Any) -> bool:
    """Whether `module` is this stand-in (read from its own namespace: a module ``__getattr__`` answers anything)."""
    return getattr(module, "__dict__", {}).get("__prov_trace_standin__") is True


def _put_on_path(root: str) -> None:
    if not any(_same(p, root) for p in sys.path):
        sys.path.insert(0, root)


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a or ".", b)
    except OSError:
        return False


def _finish_real(root: str, package: str, module: Any, launch: str) -> StandIn:
    _put_on_path(root)
    torch_spyre = importlib.import_module("torch_spyre")
    torch_spyre._autoload()
    where = getattr(module, "__file__", None) or package
    return StandIn("real", root, package, f"torch-spyre's own native extension ({where}): kernels run on the device",
                   launch)


def _install(root: str, package: str, launch: str, real_failure: str | None) -> StandIn:
    from . import module as standin_module
    from . import native

    state = standin_module.DeviceState(launch)
    mod = standin_module.build_module(state, MODULE_NAME)
    result = pyi.check(package, mod, standin_module.NOT_PROVIDED)
    if not result.ok:
        parts = []
        if result.missing_declared:
            parts.append(f"declared in its _C.pyi: {', '.join(result.missing_declared)}")
        if result.missing_used:
            parts.append("used by its Python code: " + ", ".join(
                f"{name} ({', '.join(files[:2])}{', ...' if len(files) > 2 else ''})"
                for name, files in result.missing_used.items()))
        raise StandInMismatch(
            f"the Spyre CPU stand-in does not define every _C symbol the torch-spyre tree at {root} needs; "
            f"missing: {'; '.join(parts)}",
            result.missing_declared + list(result.missing_used),
        )
    try:
        import torch

        library = native.load()
        for dtype in standin_module.supported_scalar_types():
            native.ops().allow_dtype(dtype)
    except StandInUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001
        raise StandInUnavailable(f"the Spyre CPU stand-in's device could not be set up: {type(exc).__name__}: {exc}") \
            from exc
    dxp_dir = _install_dxp()
    sys.modules[MODULE_NAME] = mod
    _put_on_path(root)
    try:
        torch_spyre = importlib.import_module("torch_spyre")
        torch_spyre._C = mod
        torch_spyre._autoload()
    except Exception:
        sys.modules.pop(MODULE_NAME, None)
        raise
    description = STANDIN_LINE
    if real_failure:
        description += f" (the tree's own torch_spyre._C did not import: {real_failure})"
    del torch
    return StandIn("stand-in", root, package, description, launch, state=state, dxp_dir=dxp_dir,
                   not_provided=standin_module.NOT_PROVIDED, native_library=library)


def _install_dxp() -> str:
    """A private directory holding ``dxp_standalone``, put first on this process's PATH."""
    directory = tempfile.mkdtemp(prefix="prov-trace-spyre-")
    atexit.register(shutil.rmtree, directory, True)
    bindir = os.path.join(directory, "bin")
    os.mkdir(bindir)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dxp_standin.py")
    exe = os.path.join(bindir, "dxp_standalone")
    with open(exe, "w", encoding="utf-8") as f:
        f.write("#!/bin/sh\n")
        f.write(f"exec {shlex.quote(sys.executable)} {shlex.quote(script)} \"$@\"\n")
    os.chmod(exe, os.stat(exe).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    os.environ[LOG_ENV] = os.path.join(directory, "dxp_standalone.jsonl")
    return directory


def active() -> StandIn | None:
    """The ``StandIn`` this process activated, if any."""
    return _active
