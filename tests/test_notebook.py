"""Jupyter (issue 15): a notebook executed in a real kernel traces a compile and shows the report inline.

The notebook runs with nbclient in an ipykernel of this interpreter. Its output
cell must hold the report as a sandboxed iframe whose ``srcdoc`` is the whole
self-contained page, with nothing (no style, script or link) outside it. Then a
kernel is restarted while a trace is still running: every record written before
the restart is still there, and a reader (a fresh kernel) gets the partial report
with one sentence saying why it is partial.
"""

from __future__ import annotations

import html
import json
import os
import re

import pytest

from conftest import EXAMPLES, REPO

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

pytestmark = pytest.mark.compile


def _notebook(*cells: str):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    return nb


@pytest.fixture
def kernel_env(monkeypatch):
    """The kernel imports this checkout's prov_trace, and compiles on one thread."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")


def _stdout(cell) -> list:
    return [o for o in cell.outputs if o.output_type == "stream" and o.name == "stdout"]


def _client(nb, cwd):
    return nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}})


AUDIT = [
    f"""\
import importlib.util, json, torch, prov_trace
spec = importlib.util.spec_from_file_location("reference_mlp", {str(EXAMPLES / "reference_mlp.py")!r})
mlp = importlib.util.module_from_spec(spec); spec.loader.exec_module(mlp)
model = mlp.SimpleMLP().eval()
x = torch.randn(2, 128)""",
    """\
with prov_trace.trace("audit.msgpack") as t:
    with torch.no_grad():
        torch.compile(model)(x)
report = t.report()
report""",
    """print(json.dumps(report.matrix("0/0 inference")))""",
    # A second trace, still running when the kernel is restarted.
    """\
@torch.compile
def tiny(v):
    return torch.relu(v) + 1

live = prov_trace.start("restarted.msgpack")
torch._dynamo.reset()
with torch.no_grad():
    tiny(torch.ones(4))
print("records", live.records)""",
]


def test_a_notebook_shows_the_report_inline_and_a_restart_loses_nothing(tmp_path, kernel_env):
    nb = _notebook(*AUDIT)
    client = _client(nb, tmp_path)
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            client.execute_cell(cell, i)
        restarted = tmp_path / "restarted.msgpack"
        before = restarted.read_bytes()
        # Restart the kernel mid-trace: the kernel process is killed, the trace never stopped.
        nbclient.util.run_sync(client.km.restart_kernel)(now=True)
        nbclient.util.run_sync(client.kc.wait_for_ready)(timeout=120)
        # What a reader sees, in the restarted kernel.
        reader = nbformat.v4.new_code_cell("import prov_trace\nr = prov_trace.load('restarted.msgpack')\nprint(r.partial)\nr")
        nb.cells.append(reader)
        client.execute_cell(reader, len(nb.cells) - 1)

    # The report, inline: one output, a sandboxed iframe holding the whole page and nothing outside it.
    (out,) = [o for o in nb.cells[1].outputs if o.output_type == "execute_result"]
    frame = out.data["text/html"]
    m = re.fullmatch(r'<iframe ([^>]*?) srcdoc="([^"]*)"></iframe>', frame, re.S)
    assert m, frame[:400]
    attrs, srcdoc = m.groups()
    assert 'sandbox="allow-scripts"' in attrs and "allow-same-origin" not in attrs
    page = html.unescape(srcdoc)
    assert page.startswith("<!DOCTYPE html>") and "default-src 'none'" in page
    assert not re.search(r"<(style|script|link)\b", frame.replace(srcdoc, ""))
    assert "text/plain" in out.data and "0/0 inference" in out.data["text/plain"]
    # It is the report of the stream the notebook wrote, and its matrix holds the run's values.
    import prov_trace

    saved = prov_trace.load(tmp_path / "audit.msgpack")
    assert page == saved.to_html()
    (printed,) = _stdout(nb.cells[2])
    matrix = json.loads(printed.text)
    assert matrix == saved.matrix("0/0 inference")
    assert matrix["origins"]["ir_pre"] == {"state": "all", "n": 3, "total": 3}
    assert matrix["origins"]["kernel_spec"] == {"state": "all", "n": 3, "total": 3}
    assert matrix["traceback"]["ir_pre"] == {"state": "none", "n": 0, "total": 3}

    # The restarted kernel's trace: every byte written before the restart is still there ...
    (rec_out,) = _stdout(nb.cells[3])
    written = int(rec_out.text.split()[1])
    assert written > 5 and restarted.read_bytes()[: len(before)] == before

    # ... and a reader, in the restarted kernel, gets the partial report and one sentence saying why.
    (said,) = _stdout(reader)
    assert said.text.strip().endswith("the stream has no end record (the run did not finish)")
    assert "\n" not in said.text.strip()
    (shown,) = [o for o in reader.outputs if o.output_type == "execute_result"]
    assert "partial" in html.unescape(shown.data["text/html"]).lower()
    partial = prov_trace.load(restarted)
    assert partial.graphs == ["0/0 inference"]
    cells = partial.matrix("0/0 inference")
    assert cells["origins"]["kernel_spec"]["state"] == "all"
    from prov_trace.stream.reader import read_trace

    trace = read_trace(restarted)
    assert not trace.complete and len(trace.records) + 1 >= written


def test_the_inline_report_leaks_no_css_into_the_notebook_page(mlp_run, tmp_path):
    """The notebook's output HTML in a real browser: the page around it keeps its own styles, the report draws."""
    from test_renderers import _browse, _png_pixels

    import prov_trace

    frame = prov_trace.load(mlp_run.trace)._repr_html_()
    host = tmp_path / "notebook.html"
    host.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><style>body{margin:3px;font-size:11px;background:#fff}</style>"
        "</head><body><p id='cell'>a notebook cell</p>" + frame +
        "<pre id='probe'></pre><script>const b = getComputedStyle(document.body), p = getComputedStyle(document.getElementById('cell'));"
        "document.getElementById('probe').textContent = JSON.stringify({margin: b.margin, size: p.fontSize, "
        "frames: document.querySelectorAll('iframe').length, styles: document.querySelectorAll('style').length});</script>"
        "</body></html>", encoding="utf-8")
    dom = _browse(tmp_path, host.as_uri(), "--dump-dom").stdout
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert m, dom[-2000:]
    seen = json.loads(html.unescape(m.group(1)))
    # The report's `body{...margin:16px 24px}` and 14px font stay inside its frame.
    assert seen == {"margin": "3px", "size": "11px", "frames": 1, "styles": 1}, seen
    shot = tmp_path / "notebook.png"
    # The report draws in an iframe (srcdoc), which a loaded machine may paint after the page's load event:
    # virtual time lets every pending load and task run before the shot.
    _browse(tmp_path, host.as_uri(), f"--screenshot={shot}", "--window-size=1000,700", "--hide-scrollbars",
            "--virtual-time-budget=10000")
    _, _, hist = _png_pixels(shot.read_bytes())
    # The frame drew the report with its own CSS: its text colour (#1b1b1b) and table headers (#f4f4f4).
    assert hist.get((0x1B, 0x1B, 0x1B), 0) > 1000 and hist.get((0xF4, 0xF4, 0xF4), 0) > 10000, \
        sorted(hist.items(), key=lambda kv: -kv[1])[:5]
