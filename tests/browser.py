"""Headless Chromium for the HTML report tests: open a page, read its #selftest result, decode a screenshot.

Chromium is Debian's `chromium` package; `make test` installs it when run as root (CI).
"""

from __future__ import annotations

import html as _html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe:
        return exe
    pytest.skip("chromium is not installed: install Debian's `chromium` package (apt-get install -y chromium); "
                "`make test` installs it when run as root")


def browse(tmp: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp)
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def selftest(tmp: Path, page: Path) -> dict:
    proc = browse(tmp, page.as_uri() + "#selftest", "--dump-dom")
    m = re.search(r'<pre id="selftest-result">(.*?)</pre>', proc.stdout, re.S)
    assert m, f"no self-test result in the DOM (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(_html.unescape(m.group(1)))


def png_pixels(data: bytes) -> tuple[int, int, dict[tuple[int, int, int], int]]:
    """Width, height and a colour histogram of an 8-bit RGB(A) PNG (the kind Chromium writes)."""
    import struct
    import zlib

    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), (depth, ctype)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride = zlib.decompress(idat), width * bpp
    prev = bytearray(stride)
    hist: dict[tuple[int, int, int], int] = {}
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        for i in range(0, stride, bpp):
            px = (line[i], line[i + 1], line[i + 2])
            hist[px] = hist.get(px, 0) + 1
        prev = line
    return width, height, hist
