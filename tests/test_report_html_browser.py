"""The HTML report in a real browser: headless Chromium (Debian package
``chromium``) loads the page with every network fetch refused, reports no
console message (no script error, no blocked fetch), and lays out the
tile-memory plot; a screenshot of the page is not blank. The console check
is itself checked on pages that do have errors."""

import os
import re
import shutil
import struct
import subprocess
import zlib

import numpy as np
import pytest

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel
from onnx_models import mlp

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian package: chromium)")


def chromium(tmp_path, target, *extra, timeout=60):
    """Runs headless Chromium on ``target``; returns (stdout, console messages)."""
    args = [
        CHROMIUM, "--headless=new", "--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage", "--no-first-run",
        "--no-default-browser-check", "--disable-extensions", "--disable-background-networking", "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", *extra, f"file://{target}",
    ]
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"Chromium did not finish within {timeout} s: {' '.join(args)}")
    # Chromium logs every console message of the page as "...:CONSOLE:<line>] "<message>", source: ...".
    console = [line for line in r.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return r.stdout, console


def _pixels_vary(png: bytes) -> int:
    """Distinct byte values of the decoded scanlines of a PNG (a blank page has a handful)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(png):
        (n,) = struct.unpack(">I", png[pos:pos + 4])
        kind = png[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += png[pos + 8:pos + 8 + n]
        pos += 12 + n
    return len(set(zlib.decompress(idat)))


@pytest.fixture(scope="module")
def report_page(tmp_path_factory):
    rng = np.random.default_rng(1)
    model, _ = mlp([8, 16, 16, 4], rng)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    d = tmp_path_factory.mktemp("html")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NEURENIX_IPU_LOCK_DIR", str(d / "locks"))
        with GraphCoreManager(num_ipus=2, device_iterations=2, precision="float32",
                              ipu_model=IPUModel(num_ipus=2, tiles_per_ipu=8)) as ipu:
            compiled = ipu.compile_model(model, x)
            ipu.execute_model(compiled, np.concatenate([x, x]))
            run = ipu.last_execution_report
    return compiled.report, run, d


def test_the_console_check_sees_script_errors_and_blocked_fetches(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><script>notDefinedAnywhere();</script></body></html>")
    _, console = chromium(tmp_path, bad, "--dump-dom")
    assert any("notDefinedAnywhere" in line for line in console), console
    fetch = tmp_path / "fetch.html"
    fetch.write_text(
        "<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'\">"
        "</head><body><img src=\"https://example.org/a.png\"></body></html>"
    )
    _, console = chromium(tmp_path, fetch, "--dump-dom")
    assert any("example.org" in line for line in console), console


@pytest.mark.parametrize("plots", ["matplotlib", "built-in"])
def test_report_page_loads_cleanly_and_draws_the_tile_memory_plot(report_page, tmp_path, plots):
    rep, run, d = report_page
    page = d / f"report-{plots}.html"
    if plots == "matplotlib":
        pytest.importorskip("matplotlib")
        rep.to_html(str(page), execution=run)
    else:
        from neurenix.hardware.graphcore.report_html import render_html

        page.write_text(render_html(rep, execution=run, use_matplotlib=False), encoding="utf-8")
    dom, console = chromium(tmp_path, page, "--dump-dom")
    assert console == [], "\n".join(console)
    m = re.search(r'<figure[^>]*id="tile-memory-plot"[^>]*>(.*?)</figure>', dom, re.S)
    assert m, dom[:2000]
    fig = m.group(1)
    assert "<svg" in fig and "Tile memory" in fig
    # Two stacked bars per tile (always live, not always live), each a drawn shape.
    bars = re.findall(r'id="(tm-ipu\d+-tile\d+-(?:not-)?always)"', fig)
    want = {f"tm-ipu{t.ipu}-tile{t.tile}-{k}" for t in rep.tiles for k in ("always", "not-always")}
    assert set(bars) == want and len(bars) == len(want)
    assert len(re.findall(r"<(?:path|rect)\b", fig)) >= len(want)
    # The page's tables came through the browser too.
    assert re.search(r'<section id="plans">.*dense1.*</section>', dom, re.S)
    assert f"{run.cycles:,}" in dom


def test_report_page_screenshot_is_not_blank(report_page, tmp_path):
    rep, run, d = report_page
    page = d / "report-shot.html"
    rep.to_html(str(page), execution=run)
    shot = tmp_path / "shot.png"
    _, console = chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=1200,2000", "--hide-scrollbars")
    assert console == [], "\n".join(console)
    assert shot.exists() and os.path.getsize(shot) > 10000
    assert _pixels_vary(shot.read_bytes()) > 50
    try:
        from PIL import Image
    except ImportError:
        return
    # The tile-memory bars are on screen: many pixels of the always-live colour (#4c72b0).
    img = Image.open(shot).convert("RGB")
    blue = sum(n for n, (r, g, b) in img.getcolors(img.width * img.height)
               if abs(r - 0x4C) + abs(g - 0x72) + abs(b - 0xB0) < 24)
    assert blue > 5000, blue
