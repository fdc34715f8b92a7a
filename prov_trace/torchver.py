"""Which torch releases prov-trace supports, and how a hook says which releases its target holds for.

Version ranges are data: a `contract.Hook` carries a ``torch`` range (">=2.10", "<2.10", ">=2.10,<2.15";
empty holds for every release) and a profile's hooks for the installed torch are the ones whose range
holds (`contract.Profile.hooks_for`). Probe code never branches on the version.

The installed version is read from torch/version.py (else the package metadata), so nothing here
imports torch. docs/compat.md gives the measured range.
"""

from __future__ import annotations

import logging
import re
import sys

#: The oldest release the probes work on end to end (docs/compat.md), and the newest `make test-compat` measured.
OLDEST_SUPPORTED = "2.10.0"
NEWEST_TESTED = "2.14.1"


def version_tuple(text: str) -> tuple[int, ...]:
    """'2.10.0+cu128' -> (2, 10, 0); '2.15.0a0+git' -> (2, 15, 0); '2.13' -> (2, 13)."""
    out = []
    for part in re.split(r"[.+]", str(text))[:3]:
        m = re.match(r"\d+", part)
        if not m:
            break
        out.append(int(m.group()))
    return tuple(out)


_OPS = {">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        "==": lambda a, b: a == b}
_CLAUSE = re.compile(r"^(>=|<=|==|<|>)\s*(\d+(?:\.\d+){0,2})$")


def check_range(spec: str) -> None:
    """Raise ValueError unless `spec` is a comma-separated list of clauses like '>=2.10' ('' is every release)."""
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        if not _CLAUSE.match(clause):
            raise ValueError(f"not a torch version range: {spec!r} (write e.g. '>=2.10' or '>=2.10,<2.15')")


def in_range(version: str | tuple[int, ...], spec: str) -> bool:
    """Whether `version` satisfies `spec`. Compared on the clause's precision: '<2.10' is below 2.10.anything,
    '==2.12' is any 2.12.x."""
    check_range(spec)
    v = version_tuple(version) if isinstance(version, str) else tuple(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        m = _CLAUSE.match(clause)
        assert m is not None
        want = version_tuple(m.group(2))
        if not _OPS[m.group(1)](v[:len(want)], want):
            return False
    return True


_VERSION_PY = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", re.M)


def installed() -> str | None:
    """The torch release here, torch not imported: the loaded module's when it is loaded, else the
    ``__version__`` line of the installed package's ``torch/version.py`` (about 5 ms), else the package
    metadata (importlib.metadata scans every installed distribution: about 140 ms), else None."""
    torch = sys.modules.get("torch")
    ver = getattr(torch, "__version__", None) if torch is not None else None
    if isinstance(ver, str):
        return ver
    return _from_source() or _from_metadata()


def _from_source() -> str | None:
    try:
        import importlib.util
        import os

        spec = importlib.util.find_spec("torch")  # finds the package, imports nothing
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        for loc in locations:
            path = os.path.join(loc, "version.py")
            if os.path.isfile(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    m = _VERSION_PY.search(f.read(65536))
                if m:
                    return m.group(1)
    except Exception:  # noqa: BLE001 - an odd install: the metadata may still say
        return None
    return None


def _from_metadata() -> str | None:
    try:
        from importlib import metadata

        return metadata.version("torch")
    except Exception:  # noqa: BLE001 - not installed, or broken metadata
        return None


def gate(version: str | None) -> tuple[int, str | None]:
    """(exit status, message) for a torch release, checked before anything is traced: (2, one sentence)
    below the supported range, (0, a one-line warning) above the newest tested, (0, None) otherwise
    (and when torch is not installed: what fails then says so itself)."""
    if not version:
        return 0, None
    v = version_tuple(version)
    if v < version_tuple(OLDEST_SUPPORTED):
        return 2, (f"torch {version} is older than {OLDEST_SUPPORTED}, the oldest release prov-trace supports: "
                   f"upgrade torch (pip install 'torch>={OLDEST_SUPPORTED}')")
    if v[:3] > version_tuple(NEWEST_TESTED):
        return 0, (f"warning: torch {version} is newer than {NEWEST_TESTED}, the newest release prov-trace was "
                   f"tested on; `prov-trace targets` checks that every hook still resolves")
    return 0, None


class NoCudaRuntimeNote(logging.Filter):
    """Drops the "No CUDA runtime is found" warning a CUDA build of torch logs (logger
    ``torch.utils.cpp_extension``) when cpp_extension is first imported on a machine without a GPU.
    Where prov-trace is the program (a model audit) or caused the import (the Spyre stand-in's build),
    it says nothing about the user's run; a script's own run keeps it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "No CUDA runtime is found" not in str(record.msg)
