"""Run a script as `python script.py` would (runpy, as __main__), writing when it started and ended.

    PROV_TRACE_PHASES=marks.json python bench/scripts/marked.py script.py [args...]

The untraced side of bench/whole_process.py's phase table: the same marks prov-trace's
own run writes (process start, program ended), with no tracer in the process.
"""

import json
import os
import runpy
import sys
import time

started = time.time()
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(script))
try:
    runpy.run_path(script, run_name="__main__")
finally:
    ended = time.time()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    from prov_trace.api import _process_start

    with open(os.environ["PROV_TRACE_PHASES"], "w") as f:
        json.dump({"process_start": _process_start(), "marks": [["runner started", started], ["program ended", ended]],
                   "trace": None}, f)
