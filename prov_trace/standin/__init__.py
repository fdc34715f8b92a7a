"""Stand-ins for the native parts of a compile pipeline, so its Python compile path runs on a machine
without the device. Today: torch-spyre (``prov_trace.standin.spyre``).

Importing this package changes nothing; a stand-in is installed only by its ``activate()``.
It imports nothing from the rest of prov-trace.
"""

from prov_trace.standin.spyre import (  # noqa: F401
    STANDIN_LINE,
    KernelNotRun,
    NotATorchSpyreTree,
    StandIn,
    StandInError,
    StandInMismatch,
    StandInUnavailable,
    activate,
    active,
)
