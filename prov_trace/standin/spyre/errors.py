"""The stand-in's errors. Each message is written for the person running prov-trace."""

from __future__ import annotations


class StandInError(Exception):
    """Base class: something about the stand-in or the torch-spyre tree it was given."""


class NotATorchSpyreTree(StandInError, ValueError):
    """The directory given as a torch-spyre tree is not one. The message is one sentence."""


class StandInMismatch(StandInError):
    """The torch-spyre tree needs ``_C`` symbols the stand-in does not define; ``missing`` names them."""

    def __init__(self, message: str, missing: list[str]):
        super().__init__(message)
        self.missing = list(missing)


class StandInUnavailable(StandInError):
    """The stand-in cannot be installed here (e.g. its native part cannot be built)."""


class KernelNotRun(RuntimeError):
    """A compiled Spyre kernel was launched; the CPU stand-in compiles, it does not run kernels.

    Raised after the compile (and the trace of it) is complete: by ``launch_jobplan`` on the
    first launch (``launch="raise"``), or by ``StandIn.check_kernels_run()`` once the caller has
    run the model (``launch="defer"``). ``kernels`` names the kernels that were not run.
    """

    def __init__(self, kernels: list[str], deferred: bool = False):
        self.kernels = list(kernels)
        self.deferred = deferred
        shown = ", ".join(self.kernels[:3]) + (f" and {len(self.kernels) - 3} more" if len(self.kernels) > 3 else "")
        what = f"{len(self.kernels)} compiled Spyre kernel(s) ({shown})" if deferred else f"the compiled Spyre kernel {shown}"
        super().__init__(
            f"Spyre CPU stand-in: the compile is complete, but {what} cannot run here: running Spyre kernels "
            "needs a Spyre device, and the stand-in only compiles"
            + (" (their outputs were left as zeros)." if deferred else ".")
        )
