"""Build (once, cached) and load the stand-in's small C++ library: the host-backed "spyre" device.

The library is compiled with the C++ compiler against the installed torch's headers and
libraries, directly (no ninja, no Python headers), and kept in a user cache directory keyed
by the source, the torch build and the compiler. A second process finds it there; two
processes building at once take turns on a lock file. Loading it registers the device's
allocator, guard, hooks and aten kernels for the whole process, so only ``activate()``
loads it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from prov_trace import torchver
from prov_trace.files import CACHE_ENV, cache_root

from .errors import StandInUnavailable

SOURCE = Path(__file__).with_name("_native.cpp")
OPS_NAMESPACE = "prov_trace_spyre"

_lock = threading.Lock()
_loaded: str | None = None


def _compiler() -> str:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)  # type: ignore[return-value]
    raise StandInUnavailable(
        "the Spyre CPU stand-in needs a C++ compiler to build its device (none of $CXX, c++, g++, clang++ is on PATH)"
    )


def _compiler_version(cxx: str) -> str:
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def _command(cxx: str, out: Path) -> list[str]:
    import torch

    logger, note = logging.getLogger("torch.utils.cpp_extension"), torchver.NoCudaRuntimeNote()
    logger.addFilter(note)
    try:
        from torch.utils import cpp_extension
    finally:
        logger.removeFilter(note)

    includes = cpp_extension.include_paths()
    libdirs = cpp_extension.library_paths()
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    cmd = [cxx, "-O1", "-std=c++20", "-fPIC", "-shared", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-w"]
    cmd += [f"-I{p}" for p in includes]
    cmd += [str(SOURCE), "-o", str(out)]
    cmd += [f"-L{p}" for p in libdirs] + ["-lc10", "-ltorch_cpu", "-ltorch"]
    cmd += [f"-Wl,-rpath,{p}" for p in libdirs]
    if sys.platform == "darwin":
        cmd += ["-undefined", "dynamic_lookup"]
    return cmd


def _key(cxx: str) -> str:
    import torch

    h = hashlib.sha256()
    h.update(SOURCE.read_bytes())
    h.update(torch.__version__.encode())
    h.update(str(getattr(torch.version, "git_version", "")).encode())
    h.update(os.path.dirname(torch.__file__).encode())
    h.update(_compiler_version(cxx).encode())
    h.update(sys.platform.encode())
    return h.hexdigest()[:20]


def library_path(build: bool = True) -> Path:
    """The built library for this torch and compiler; built now if it is missing and `build`."""
    cxx = _compiler()
    target_dir = cache_root() / "spyre-standin" / _key(cxx)
    target = target_dir / "libprov_trace_spyre_standin.so"
    if target.is_file() or not build:
        return target
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StandInUnavailable(f"cannot create the stand-in's build directory {target_dir}: "
                                 f"{exc.strerror or exc}; set {CACHE_ENV} to a writable directory") from None
    with _FileLock(target_dir / ".lock"):
        if target.is_file():
            return target
        fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=target_dir)
        os.close(fd)
        cmd = _command(cxx, Path(tmp))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.SubprocessError) as exc:
            _unlink(tmp)
            raise StandInUnavailable(f"building the Spyre CPU stand-in's device failed to start: {exc}") from None
        if proc.returncode != 0:
            _unlink(tmp)
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-25:])
            raise StandInUnavailable(
                f"building the Spyre CPU stand-in's device failed (exit {proc.returncode}):\n"
                f"  {shlex.join(cmd)}\n{tail}"
            )
        os.replace(tmp, target)
        (target_dir / "build-command.txt").write_text(shlex.join(cmd) + "\n")
    return target


def load() -> str:
    """Build if needed and load the library into this process (once). Returns its path."""
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        import torch

        path = library_path()
        try:
            torch.ops.load_library(str(path))
        except (OSError, RuntimeError) as exc:
            raise StandInUnavailable(f"loading the Spyre CPU stand-in's device ({path}) failed: {exc}") from None
        _loaded = str(path)
        return _loaded


def ops():
    """The library's helper operators (``torch.ops.prov_trace_spyre``); the library must be loaded."""
    import torch

    return getattr(torch.ops, OPS_NAMESPACE)


class _FileLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def __enter__(self) -> "_FileLock":
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except ImportError:  # no flock here: proceed without cross-process exclusion
            pass
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            try:
                import fcntl

                fcntl.flock(self.fd, fcntl.LOCK_UN)
            except ImportError:
                pass
            os.close(self.fd)
            self.fd = None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
