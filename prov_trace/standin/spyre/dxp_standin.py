"""Stand-in for the backend compiler ``dxp_standalone`` that torch-spyre runs on each SuperDSC bundle.

torch-spyre's ``SpyreAsyncCompile.sdsc()`` runs ``dxp_standalone -d <bundle dir>`` and
requires exit status 0. This script accepts the bundle when the directory holds at least one
``sdsc_*.json`` file that parses to a JSON object, and compiles nothing: it writes nothing
into the bundle directory. Each call is appended as one JSON line to the file named by
``$PROV_TRACE_SPYRE_DXP_LOG`` (when set), which the stand-in reads back.

It runs as its own process and imports nothing from prov-trace.
"""

from __future__ import annotations

import json
import os
import sys
import time

LOG_ENV = "PROV_TRACE_SPYRE_DXP_LOG"


def _check(directory: str) -> tuple[list[str], int, str | None]:
    if not os.path.isdir(directory):
        return [], 0, f"{directory} is not a directory"
    names = sorted(n for n in os.listdir(directory) if n.startswith("sdsc_") and n.endswith(".json"))
    if not names:
        return [], 0, f"{directory} holds no sdsc_*.json file"
    ops = 0
    for name in names:
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as exc:
            return names, ops, f"{name} is not readable JSON: {exc}"
        if not isinstance(doc, dict):
            return names, ops, f"{name} is a JSON {type(doc).__name__}, not an object"
        ops += len(doc)
    return names, ops, None


def main(argv: list[str]) -> int:
    directory = None
    if len(argv) == 2 and argv[0] == "-d":
        directory = argv[1]
    if directory is None:
        print("dxp_standalone (prov-trace Spyre CPU stand-in): usage: dxp_standalone -d BUNDLE_DIR", file=sys.stderr)
        return 2
    names, ops, error = _check(directory)
    log = os.environ.get(LOG_ENV)
    if log:
        entry = {"t": time.time(), "argv": argv, "dir": os.path.abspath(directory), "sdsc_files": names,
                 "ops": ops, "accepted": error is None, "error": error}
        try:
            with open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
        except OSError:
            pass
    if error:
        print(f"dxp_standalone (prov-trace Spyre CPU stand-in): {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
