"""Real browser: every notebook runs in JupyterLab (headless Chromium), and every slider redraws a figure.

For each notebooks/*.ipynb a copy with ``PROFILE = "ci"`` (the committed notebook is never touched)
is opened in one shared JupyterLab server and run with Run > Run All Cells. The test waits until
every code cell has run, failing at once with the text of the first error output; then it moves
each slider on the page one step with the keyboard (as a student would) and checks that a plotly
figure's data changed, and that no figure on the page is blank. On failure a full-page screenshot
goes to ``$LABKIT_ARTIFACTS`` (default ``build/artifacts/browser/``, ignored by git) and its path is
in the failure message. A released course notebook (`labkit course build`) is opened too: its first
exercise's check cell reports 0, then full marks once the exercise cell holds the solution.
"""

from __future__ import annotations

import json
import os
import re
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
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(os.environ.get("LABKIT_ARTIFACTS") or ROOT / "build" / "artifacts" / "browser")

#: The notebook on show (a hidden tab's cells would match too).
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
#: Bounds on each wait, sized for a busy 2-core CI machine (an error output fails at once).
START_S, RUN_ALL_S, SLIDER_S = 120, 420, 180


def ci_copy(src: Path, dst: Path) -> None:
    """Copy notebook `src` to `dst` with its parameters cell's PROFILE set to "ci"."""
    nb = json.loads(src.read_text())
    params = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1, f"{src.name}: needs exactly one code cell tagged 'parameters'"
    text = "".join(params[0]["source"])
    new, n = re.subn(r'^PROFILE\s*=.*$', 'PROFILE = "ci"', text, count=1, flags=re.M)
    assert n == 1, f"{src.name}: its parameters cell has no `PROFILE = ...` line"
    params[0]["source"] = new.splitlines(keepends=True)
    dst.write_text(json.dumps(nb, indent=1))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(base: str, token: str, path: str, method: str = "GET"):
    req = urllib.request.Request(f"{base}{path}", method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body else None


@pytest.fixture(scope="module")
def jupyter_lab(tmp_path_factory):
    """Start one `jupyter lab` on 127.0.0.1 serving ci copies of every notebook; always shut it down."""
    tmp = tmp_path_factory.mktemp("browser")
    work = tmp / "lab"
    work.mkdir()
    for nb in NOTEBOOKS:
        ci_copy(nb, work / nb.name)
    # Render every cell (JupyterLab 4 otherwise detaches cells scrolled out of view), and no
    # notifications popping up over the page.
    settings = tmp / "settings"
    (settings / "@jupyterlab" / "notebook-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
        json.dumps({"windowingMode": "none"}))
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp / "rt"), JUPYTERLAB_WORKSPACES_DIR=str(tmp / "ws"),
               JUPYTERLAB_SETTINGS_DIR=str(settings))
    cmd = [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", f"--port={port}", "--no-browser",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log_path = tmp / "jupyter.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + START_S
        while True:
            try:
                # The port it really bound (it moves on if another process took ours meanwhile).
                info = next((tmp / "rt").glob("jpserver-*.json"), None)
                if info is None:
                    raise FileNotFoundError("no server info yet")
                port = json.loads(info.read_text())["port"]
                _api(f"http://127.0.0.1:{port}", token, "/api/status")
                break
            except (OSError, ValueError, KeyError):
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("jupyter lab did not start:\n" + log_path.read_text()[-3000:])
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}", token, log_path
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


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="python playwright is not installed")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        try:
            yield b, sync_api
        finally:
            b.close()


# What the page looks like now, in one call: kernel status, prompts, error outputs, figures.
STATUS_JS = r"""() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)') || document;
  const ind = panel.querySelector('.jp-Notebook-ExecutionIndicator')
           || document.querySelector('.jp-Notebook-ExecutionIndicator');
  const prompts = Array.from(panel.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt'))
    .map(e => e.textContent.trim());
  const errors = Array.from(panel.querySelectorAll(
      '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'))
    .map(e => e.innerText).filter(t => /Traceback \(most recent call last\)|^\w*(Error|Exception)\b/m.test(t));
  return {kernel: ind ? ind.getAttribute('data-status') : null,
          busy: prompts.filter(p => p.includes('*')).length,
          done: prompts.filter(p => /\[\d+\]/.test(p)).length,
          cells: prompts.length, errors: errors};
}"""

# Each plotly figure (optionally only those in the cell of `el`): a digest of its traces' data and
# how many points its fullest trace has. `.data` is the plotly graph div's own trace list.
FIGURES_JS = r"""(el) => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)') || document;
  const root = el ? (el.closest('.jp-Cell') || panel) : panel;
  const col = v => v == null ? null : (v.bdata !== undefined ? v.bdata
                 : (typeof v.length === 'number' && typeof v !== 'string' ? Array.from(v) : v));
  const len = v => v == null ? 0 : (v.bdata !== undefined ? v.bdata.length : (v.length || 0));
  return Array.from(root.querySelectorAll('.js-plotly-plot')).map(g => {
    const data = g.data || [];
    const keys = ['x', 'y', 'z', 'values', 'r', 'lat', 'lon'];
    const digest = JSON.stringify(data.map(t => keys.map(k => col(t[k]))));
    const points = Math.max(0, ...data.map(t => Math.max(...keys.map(k => len(t[k])))));
    const title = (g.querySelector('.gtitle') || {}).textContent || '';
    const cell = g.closest('.jp-Cell');
    const where = cell ? 'code cell ' + Array.from(panel.querySelectorAll('.jp-CodeCell')).indexOf(cell) : '?';
    const kinds = data.map(t => (t.type || 'scatter') + ':' + keys.filter(k => t[k] != null)
                               .map(k => k + '=' + len(t[k])).join(',')).join(' ');
    return {digest: digest, points: points, traces: data.length, title: title,
            name: (title || 'untitled figure') + ' (' + where + '; traces ' + (kinds || 'none') + ')'};
  });
}"""


def _wait_kernel(page, name: str) -> None:
    """Wait until the notebook's kernel is idle; a fresh lab may first ask which kernel to start: take python3."""
    idle = page.locator(f"{PANEL} .jp-Notebook-ExecutionIndicator[data-status='idle']")
    deadline, calm = time.time() + START_S, 0
    while calm < 4:  # idle, and no dialog, for 2 s: the dialog may come after the indicator reads idle
        if _accept_kernel_dialog(page):
            calm = 0
        calm = calm + 1 if idle.count() else 0
        if time.time() > deadline:
            raise AssertionError(f"{name}: its kernel was not idle within {START_S} s of opening it")
        time.sleep(0.5)


def _accept_kernel_dialog(page) -> bool:
    """Click "Select" on a "Select Kernel" dialog if one is up (it blocks Run All); True if it was."""
    select = page.locator(".jp-Dialog").get_by_role("button", name="Select", exact=True)
    if select.count() and select.first.is_visible():
        select.first.click()
        return True
    return False


def _run_all(page) -> None:
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()


def _wait_run_all(page, name: str) -> None:
    """Wait until Run All has run every code cell; fail at once on an error output or a stopped run."""
    deadline, started = time.time() + RUN_ALL_S, False
    while True:
        s = page.evaluate(STATUS_JS)
        if s["errors"]:
            raise AssertionError(f"{name}: a cell raised:\n{s['errors'][0][-4000:]}")
        started = started or s["busy"] > 0 or s["done"] > 0
        if not started and _accept_kernel_dialog(page):
            time.sleep(2)
            _run_all(page)  # the dialog swallowed the first Run All
        if started and s["busy"] == 0 and s["kernel"] == "idle":
            if s["done"] == s["cells"]:
                return
            time.sleep(2)  # a prompt between two cells; look again before calling it a stop
            s2 = page.evaluate(STATUS_JS)
            if s2["busy"] == 0 and s2["kernel"] == "idle" and s2["done"] < s2["cells"] and not s2["errors"]:
                raise AssertionError(f"{name}: Run All stopped after {s2['done']} of {s2['cells']} code cells "
                                     "without an error output")
        if time.time() > deadline:
            raise AssertionError(f"{name}: Run All did not finish within {RUN_ALL_S} s "
                                 f"({s['done']} of {s['cells']} code cells ran, {s['busy']} busy)")
        time.sleep(1)


def _check_figures(page, name: str, when: str) -> list[dict]:
    figs = page.evaluate(FIGURES_JS, None)
    blank = [f["name"] for f in figs if f["traces"] == 0 or f["points"] == 0]
    assert not blank, f"{name}: blank figure(s) {when}: {blank}"
    bad = [f["title"] for f in figs if f["title"].startswith("error:")]
    assert not bad, f"{name}: a slider update failed {when}: {bad[0]}"
    return figs


def _wait_changed(page, name: str, what: str, el, local: bool, before: list) -> None:
    """Wait until a figure's data (in `el`'s cell when it has one, else on the page) differs from `before`."""
    scope = "its cell" if local else "the page"
    deadline = time.time() + SLIDER_S
    while True:
        time.sleep(0.5)
        s = page.evaluate(STATUS_JS)
        if s["errors"]:
            raise AssertionError(f"{name}: {what} raised:\n{s['errors'][0][-4000:]}")
        figs = el.evaluate(FIGURES_JS) if local else page.evaluate(FIGURES_JS, None)
        if [f["digest"] for f in figs] != before and s["kernel"] == "idle":
            return
        if time.time() > deadline:
            raise AssertionError(f"{name}: {what} changed no figure's data in {scope} within {SLIDER_S} s "
                                 f"(kernel {s['kernel']})")


#: The controls a student moves, and how the test moves each one step.
CONTROLS = {
    "slider": ".widget-slider .noUi-handle",
    "checkbox": ".widget-checkbox input[type=checkbox]",
    "dropdown": ".widget-dropdown select",
}


def _label(el) -> str:
    return el.evaluate("e => { const w = e.closest('.widget-inline-hbox, .widget-slider, .widget-checkbox, "
                       ".widget-dropdown'); const d = w && w.querySelector('.widget-label, label'); "
                       "return d ? d.textContent.trim() : ''; }")


def _move(page, kind: str, el) -> None:
    """Move one control one step, as a student would: an arrow key, a click, the next option."""
    if kind == "slider":
        now, top = (float(el.get_attribute(a) or 0) for a in ("aria-valuenow", "aria-valuemax"))
        el.focus()
        page.keyboard.press("ArrowLeft" if now >= top else "ArrowRight")
    elif kind == "checkbox":
        el.click()
    else:
        options = el.evaluate("e => Array.from(e.options).map(o => o.value)")
        current = el.evaluate("e => e.value")
        el.select_option(options[(options.index(current) + 1) % len(options)])


def _move_sliders(page, name: str) -> dict[str, int]:
    """Move each enabled control (slider, checkbox, dropdown) one step; each move must change a
    figure's data. Returns how many controls of each kind were moved."""
    moved = dict.fromkeys(CONTROLS, 0)
    for kind, selector in CONTROLS.items():
        controls = page.locator(f"{PANEL} .jp-OutputArea-output {selector}")
        for i in range(controls.count()):
            h = controls.nth(i)
            if h.evaluate("e => !!e.closest('[disabled]') || !!e.disabled"):
                continue  # a disabled control cannot be moved (a student cannot either)
            h.scroll_into_view_if_needed()
            what = f"moving {kind} {_label(h) or i + 1!r}"
            local = bool(h.evaluate(FIGURES_JS))
            figures = (lambda h=h, local=local: h.evaluate(FIGURES_JS) if local else page.evaluate(FIGURES_JS, None))
            assert figures(), f"{name}: {what}, but the page has no plotly figure"
            # A live panel's controls act on a running job: press its start button first, as its
            # status line tells a student to, and its stop button once the move has shown.
            out = h.locator("xpath=ancestor::div[contains(@class, 'jp-OutputArea-output')][1]")
            start = out.locator("button:not([disabled])", has_text=re.compile(r"^\s*start", re.I))
            stop = out.locator("button", has_text=re.compile(r"^\s*stop", re.I))
            pressed = start.count() > 0
            if pressed:
                start.first.click()
                page.wait_for_function("(b) => !b.disabled", arg=stop.first.element_handle(), timeout=60_000)
            before = [f["digest"] for f in figures()]
            _move(page, kind, h)
            _wait_changed(page, name, what, h, local, before)
            if pressed:
                stop.first.click()
                page.wait_for_function("(b) => b.disabled", arg=stop.first.element_handle(), timeout=60_000)
            _check_figures(page, name, f"after {what}")
            moved[kind] += 1
    return moved


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_jupyterlab_and_every_slider_redraws(path, jupyter_lab, browser):
    base, token, log_path = jupyter_lab
    b, _ = browser
    page = b.new_page(viewport={"width": 1400, "height": 1000})
    try:
        # a workspace of its own, reset: the page opens this notebook alone, not every earlier one too
        page.goto(f"{base}/lab/workspaces/{path.stem}/tree/{path.name}?reset&token={token}", timeout=90_000)
        page.wait_for_selector(f"{PANEL} .jp-Cell", timeout=90_000)
        _wait_kernel(page, path.name)
        _run_all(page)
        _wait_run_all(page, path.name)
        _check_figures(page, path.name, "after Run All")
        moved = _move_sliders(page, path.name)
        # what each notebook shows a student (so a selector that finds nothing cannot pass silently)
        least = {"00_tour.ipynb": {"slider": 1}, "02_aligraph.ipynb": {"slider": 2, "dropdown": 1},
                 "05_picasso.ipynb": {"slider": 2, "checkbox": 3}}.get(path.name, {"slider": 1})
        assert all(moved[k] >= n for k, n in least.items()), (moved, least)
        if path.name == "00_tour.ipynb":
            # the dashboard drew a line, not a dot or two
            figs = page.evaluate(FIGURES_JS, None)
            assert max(f["points"] for f in figs) >= 10, figs
    except Exception as exc:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / f"{path.stem}-failure.png"
        try:
            page.screenshot(path=str(shot), full_page=True)
            where = f"screenshot: {shot}"
        except Exception as shot_exc:  # the page itself is gone
            where = f"no screenshot ({shot_exc})"
        raise AssertionError(f"{exc}\n[{where}; jupyter log: {log_path}]") from exc
    finally:
        page.close()
        try:  # free the kernel's memory before the next notebook
            for s in _api(base, token, "/api/sessions") or []:
                _api(base, token, f"/api/sessions/{s['id']}", "DELETE")
        except OSError:
            pass


def _cell_text(page, index: int) -> str:
    """The output text of the notebook's cell `index` (markdown cells count)."""
    out = page.locator(f"{PANEL} .jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea-output")
    return "\n".join(out.nth(i).inner_text() for i in range(out.count()))


def test_course_exercise_scores_after_the_student_fills_it_in(jupyter_lab, browser):
    """A released student notebook (`labkit course build`) in JupyterLab: after Run All the first
    exercise's check cell reports 0 (not done yet); once its cell holds the solution (pasted, as a
    student would) and it and its check cell are run, the check cell reports full marks."""
    from labkit.catalog import NAMES
    from labkit.course import notebooks
    from labkit.course.exercises import exercises
    import nbformat
    base, token, log_path = jupyter_lab
    b, _ = browser
    system = next(s for s in notebooks.systems() if s in NAMES)
    ex = exercises(system)[0]
    nb = notebooks.release(notebooks.render_source(system))
    name = f"student_{notebooks.notebook_name(system)}"
    sol = next(i for i, c in enumerate(nb.cells) if c.metadata.get("labkit", {}).get("exercise") == ex.id)
    chk = next(i for i, c in enumerate(nb.cells) if c.metadata.get("labkit", {}).get("check") == ex.id)
    body = json.dumps({"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(nb))}).encode()
    req = urllib.request.Request(f"{base}/api/contents/{name}", data=body, method="PUT",
                                 headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).close()
    page = b.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{base}/lab/workspaces/course/tree/{name}?reset&token={token}", timeout=90_000)
        page.wait_for_selector(f"{PANEL} .jp-Cell", timeout=90_000)
        _wait_kernel(page, name)
        _run_all(page)
        _wait_run_all(page, name)
        before = _cell_text(page, chk)
        assert f"{ex.id} ({ex.title}): score 0 / {ex.points} (not done yet" in before, before
        # the student's answer, pasted over the stub (insert_text is a paste: no auto-indent)
        editor = page.locator(f"{PANEL} .jp-Notebook .jp-Cell").nth(sol).locator(".cm-content")
        editor.click()
        page.keyboard.press("Control+a")
        page.keyboard.insert_text(notebooks.solution_source(ex))
        page.keyboard.press("Shift+Enter")  # run the exercise cell; the check cell is selected next
        page.keyboard.press("Shift+Enter")  # run the check cell
        want = f"score {ex.points} / {ex.points}"
        page.wait_for_function(
            "([i, want]) => { const c = document.querySelectorAll("
            "'.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')[i];"
            " return c && c.querySelector('.jp-OutputArea-output') && c.innerText.includes(want); }",
            arg=[chk, want], timeout=RUN_ALL_S * 1000)
        after = _cell_text(page, chk)
        assert f"{ex.id} ({ex.title}): {want}" in after and "every case passed" in after, after
    except Exception as exc:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "course-failure.png"
        try:
            page.screenshot(path=str(shot), full_page=True)
            where = f"screenshot: {shot}"
        except Exception as shot_exc:
            where = f"no screenshot ({shot_exc})"
        raise AssertionError(f"{exc}\n[{where}; jupyter log: {log_path}]") from exc
    finally:
        page.close()
        try:
            for s in _api(base, token, "/api/sessions") or []:
                _api(base, token, f"/api/sessions/{s['id']}", "DELETE")
        except OSError:
            pass
