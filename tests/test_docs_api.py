"""docs/api.md can't rot: its Python examples run, in order, in one session, and print what the page says.

Every ```python block runs as written (from a scratch directory that sees the
repository's examples/). A ```text block right after one (nothing but blank lines
between) is what that example printed, and must match exactly.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO

DOC = REPO / "docs" / "api.md"
FENCE = re.compile(r"```(\w+)\n(.*?)```\n?", re.S)

DRIVER = r"""
import contextlib, io, json, sys, traceback
blocks = json.load(open(sys.argv[1]))
ns = {"__name__": "__main__"}
outs = []
for i, code in enumerate(blocks):
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(code, f"docs/api.md example {i + 1}", "exec"), ns)
    except BaseException:
        outs.append({"out": buf.getvalue(), "error": traceback.format_exc()})
        break
    outs.append({"out": buf.getvalue(), "error": None})
print("@@OUTS@@" + json.dumps(outs))
"""


def examples() -> list[tuple[str, str | None]]:
    """(code, expected output or None) for each python block of docs/api.md, in order."""
    text = DOC.read_text()
    found = list(FENCE.finditer(text))
    out = []
    for i, m in enumerate(found):
        if m.group(1) != "python":
            continue
        expected = None
        nxt = found[i + 1] if i + 1 < len(found) else None
        if nxt is not None and nxt.group(1) == "text" and not text[m.end():nxt.start()].strip():
            expected = nxt.group(2)
        out.append((m.group(2), expected))
    return out


def test_the_page_has_an_example_per_api_item():
    code = "\n".join(c for c, _ in examples())
    for item in ("prov_trace.trace(", ".matrix(", ".to_markdown()", ".to_html()", ".to_json()", ".check(", ".diff(",
                 "prov_trace.load(", "prov_trace.start(", "prov_trace.stop()", "prov_trace.run(", "_repr_html_()",
                 "UsageError"):
        assert item in code, item
    assert all(expected is not None for _, expected in examples())


@pytest.mark.compile
def test_api_md_examples_run_and_print_what_the_page_says(tmp_path):
    blocks = examples()
    (tmp_path / "blocks.json").write_text(json.dumps([c for c, _ in blocks]))
    (tmp_path / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path / "blocks.json")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert "@@OUTS@@" in proc.stdout, proc.stderr[-4000:]
    outs = json.loads(proc.stdout.split("@@OUTS@@", 1)[1])
    for i, ((code, expected), got) in enumerate(zip(blocks, outs), 1):
        assert got["error"] is None, f"example {i} raised:\n{code}\n{got['error']}"
        if expected is not None:
            assert got["out"] == expected, f"example {i} printed something else:\n{code}\n--- got\n{got['out']}--- page\n{expected}"
    assert len(outs) == len(blocks)
    # The examples wrote only into their scratch directory.
    assert (tmp_path / "mlp.msgpack").exists() and (tmp_path / "run.md").exists()


def test_the_docs_name_the_schema_version_the_writer_writes():
    """README said schema 1.2 after the writer moved to 1.3."""
    from prov_trace.stream.schema import SCHEMA_VERSION

    want = "{}.{}".format(*SCHEMA_VERSION)
    readme = (REPO / "README.md").read_text()
    fmt = (REPO / "docs" / "trace-format.md").read_text()
    assert re.findall(r"\(schema (\d+\.\d+)\)", readme) == [want]
    assert fmt.splitlines()[0] == f"# Trace format, schema {want}"
