"""Where a script's exit goes: its atexit handlers, or the interpreter's finalization after them.

    TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 .venv/bin/python bench/exit_split.py bench/scripts/compile_encoder.py

Runs the script as python would (runpy, as __main__), with one atexit handler registered before it (so it
runs last) and one after it (so it runs first). Prints, on stderr, the handlers' times relative to the
script's end; and on stdout the script's end as a wall-clock time, so that the caller can time the rest
(`date +%s.%N` after the process exits, as docs/benchmarks.md does). Untraced: it measures the exit that a
report built "during the exit" would have to overlap.
"""

import atexit
import os
import runpy
import sys
import time

T = {}


def last():
    T["atexit_last"] = time.time()
    sys.stderr.write("MARKS %r\n" % {k: round(v - T["end"], 3) for k, v in T.items()})
    sys.stderr.flush()


atexit.register(last)
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(script))
runpy.run_path(script, run_name="__main__")
T["end"] = time.time()


def first():
    T["atexit_first"] = time.time()


atexit.register(first)
print("ENDWALL", T["end"], flush=True)
