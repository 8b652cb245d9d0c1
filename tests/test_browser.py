"""Real browser: JupyterLab in headless Chromium runs the tour and a keyboard slider move redraws the plot."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def jupyter_lab(tmp_path):
    """Start `jupyter lab` on 127.0.0.1 serving a copy of the tour; always shut it down."""
    work = tmp_path / "lab"
    work.mkdir()
    shutil.copy(ROOT / "notebooks" / "00_tour.ipynb", work / "00_tour.ipynb")  # never touch the committed one
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"), JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "ws"))
    cmd = [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", f"--port={port}", "--no-browser",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(tmp_path / "jupyter.log", "w")
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 90
        while True:
            try:
                # The port it really bound (it moves on if another process took ours meanwhile).
                info = next((tmp_path / "rt").glob("jpserver-*.json"), None)
                if info is None:
                    raise FileNotFoundError("no server info yet")
                port = json.loads(info.read_text())["port"]
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
                break
            except (OSError, ValueError, KeyError):
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("jupyter lab did not start:\n" + (tmp_path / "jupyter.log").read_text()[-3000:])
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}", token
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_tour_runs_in_jupyterlab_and_slider_redraws_plot(jupyter_lab, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="python playwright is not installed")
    base, token = jupyter_lab
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{base}/lab/tree/00_tour.ipynb?token={token}", timeout=90_000)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            # a fresh lab may ask which kernel to start: take the notebook's own (python3)
            try:
                page.get_by_role("button", name="Select", exact=True).click(timeout=15_000)
            except sync_api.TimeoutError:
                pass
            # wait for the kernel to be ready, then Run > Run All Cells
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
            handle = page.locator(".widget-slider .noUi-handle").last
            handle.wait_for(timeout=240_000)
            plot_title = page.locator(".js-plotly-plot .gtitle").last
            page.wait_for_function(
                "() => Array.from(document.querySelectorAll('.js-plotly-plot .gtitle'))"
                ".some(e => e.textContent.includes('sorted is'))", timeout=240_000)
            # all cells done: no busy prompts left
            page.wait_for_function(
                "() => !Array.from(document.querySelectorAll('.jp-InputPrompt')).some(e => e.textContent.includes('*'))",
                timeout=240_000)
            before = plot_title.text_content()
            handle.focus()
            page.keyboard.press("ArrowLeft")
            page.wait_for_function(
                "(t) => { const e = Array.from(document.querySelectorAll('.js-plotly-plot .gtitle')).pop();"
                " return e && e.textContent !== t && e.textContent.includes('sorted is'); }",
                arg=before, timeout=120_000)
            after = plot_title.text_content()
            shot = tmp_path / "tour.png"
            page.screenshot(path=str(shot), full_page=False)
            assert shot.stat().st_size > 10_000
        except Exception:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            print(f"browser test failed; screenshot at {tmp_path / 'failure.png'}")
            raise
        finally:
            browser.close()
    assert before != after
    assert "524,288 rows" in after  # 2**19 after one step left from 2**20
