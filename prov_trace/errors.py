"""The errors prov-trace raises for a user, each with its exit status.

Every message is one sentence that says what to do next. The command line
prints it as ``prov-trace: error: ...`` and exits with ``exit_code``; the
Python API raises it as it is.
"""

from __future__ import annotations

#: Exit statuses (also in ``prov-trace --help``, the README and docs).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


class ProvTraceError(Exception):
    """Base of the errors meant for a user."""

    exit_code = EXIT_FAILED


class UsageError(ProvTraceError):
    """Bad input from the user (a target, an option, a file): one sentence saying what to do. Exit status 2."""

    exit_code = EXIT_BAD_INPUT
