"""The formats a report can be written in, and which one a path asks for.

Kept apart from the report package's heavier modules: `prov-trace run` checks the
report's format before the program starts, and loads the rest only once it ends.
"""

from __future__ import annotations

import os

#: The formats a report can be written in; `auto` takes it from the output path's suffix.
FORMATS = ("auto", "md", "html", "json")
SUFFIXES = {".html": "html", ".htm": "html", ".json": "json", ".md": "md"}


def output_format(path: str | None, fmt: str = "auto") -> str:
    """The format to write: the one asked for, else the one the output path's suffix names, else Markdown."""
    if fmt != "auto":
        return fmt
    return SUFFIXES.get(os.path.splitext(path or "")[1].lower(), "md")


NAMES = {"md": "Markdown", "html": "HTML", "json": "JSON"}


def suffix_disagrees(path: str | None, fmt: str) -> str | None:
    """A note when an explicit --format is not the one `path`'s suffix names (`--format md -o r.html`): the
    format asked for is written, and the user is told, in case the suffix was what they meant."""
    named = SUFFIXES.get(os.path.splitext(path or "")[1].lower())
    if fmt == "auto" or named is None or named == fmt:
        return None
    return (f"writing {NAMES.get(fmt, fmt)} to {path}, as --format {fmt} asks, though its suffix names "
            f"{NAMES.get(named, named)}")
