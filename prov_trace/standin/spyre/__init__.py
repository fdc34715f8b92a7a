"""The CPU stand-in for torch-spyre's native side: ``torch_spyre._C``, the device runtime, ``dxp_standalone``.

Written for prov-trace from torch-spyre's ``_C.pyi`` and the behaviour of its ``csrc/``; no
torch-spyre code is copied. ``activate(tree)`` installs it (see ``activate.py``).
"""

from .activate import STANDIN_LINE, StandIn, activate, active  # noqa: F401
from .errors import (  # noqa: F401
    KernelNotRun,
    NotATorchSpyreTree,
    StandInError,
    StandInMismatch,
    StandInUnavailable,
)
