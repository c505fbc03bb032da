"""The dashboard in a subprocess and what the browser tests read from its pages."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.cli import free_port
from tests.helpers.paths import ROOT

ARTIFACTS = ROOT / "tests" / "artifacts"


DIVISORS = {"µs": 1e3, "ms": 1e6, "s": 1e9, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


# Overlapping text in the visible figures: tick labels of one axis, and annotations (titles, notes).
OVERLAPS_JS = """
() => {
  const hit = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const pairs = (els, where) => {
    const boxes = els.map(e => [e.textContent, e.getBoundingClientRect()]).filter(([, b]) => b.width > 0);
    const out = [];
    for (let i = 0; i < boxes.length; i++)
      for (let j = i + 1; j < boxes.length; j++)
        if (hit(boxes[i][1], boxes[j][1])) out.push(`${where}: "${boxes[i][0]}" / "${boxes[j][0]}"`);
    return out;
  };
  const out = [];
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    if (!gd.offsetParent) continue;
    const id = gd.parentElement.id || gd.closest('[id]').id;
    for (const axis of gd.querySelectorAll('.xaxislayer-above, .yaxislayer-above'))
      out.push(...pairs([...axis.querySelectorAll('text')], id + ' ticks'));
    out.push(...pairs([...gd.querySelectorAll('g.annotation')], id + ' annotations'));
    out.push(...pairs([...gd.querySelectorAll('.textpoint text')].filter(e => e.textContent), id + ' point labels'));
  }
  const bars = document.querySelector('#policy-bars');
  if (bars && bars.offsetParent)
    out.push(...pairs([...bars.querySelectorAll('.row-label, .head strong, .panel-note, .value, .missing')],
                      'policy-bars'));
  return out;
}
"""


# Visible figures that draw nothing and say nothing.
EMPTY_JS = """
() => {
  const out = [];
  const has = v => Array.isArray(v) && v.some(x => x !== null && x !== undefined && !(Array.isArray(x) && !x.length));
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    if (!gd.offsetParent) continue;
    const note = gd.layout && gd.layout.meta && gd.layout.meta.note;
    const drawn = (gd.data || []).some(t => has(t.x) || has(t.y) || has(t.z));
    if (!note && !drawn) out.push(gd.closest('[id]').id);
  }
  const bars = document.querySelector('#policy-bars');
  if (bars && bars.offsetParent) {
    const n = bars.querySelectorAll('.row-label').length;
    const said = bars.querySelectorAll('.bar, .missing').length
      + [...bars.querySelectorAll('.panel-note')].filter(e => e.textContent).length;
    if (!n && !bars.textContent.includes('Select runs')) out.push('policy-bars: no rows and no note');
    if (n && !said) out.push('policy-bars: rows without bars or notes');
  }
  const panel = document.querySelector('#findings-panel');
  if (panel && panel.offsetParent && !panel.querySelector('.finding, .run-findings, .note'))
    out.push('findings-panel: no findings and no note');
  return out;
}
"""


def answers(url: str, tries: int, pause: float) -> bool:
    """Whether *url* answers within *tries* attempts, *pause* seconds apart (a server starting)."""
    for _ in range(tries):
        try:
            urllib.request.urlopen(url, timeout=1)
            return True
        except OSError:
            time.sleep(pause)
    return False


@contextlib.contextmanager
def dashboard(folder: Path, *extra: str):
    """`python -m dashboards FOLDER [EXTRA...]` on a free port; yields its URL and process once it answers."""
    port = free_port()
    env = dict(os.environ)  # the test session's own cache (conftest)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dashboards", str(folder), "--port", str(port), *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        if not answers(url, 150, 0.2):
            proc.kill()
            pytest.fail(proc.stdout.read())
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(timeout=60)  # a stop takes well under a second; up to a minute beside another test worker


def figure(page, graph_id: str) -> dict:
    return page.evaluate(
        f"(() => {{ const gd = document.querySelector('#{graph_id} .js-plotly-plot');"
        " return {data: gd.data, layout: {meta: gd.layout.meta, annotations: gd.layout.annotations}}; })()"
    )


def wait_rows(page, n: int) -> None:
    page.wait_for_function(f"document.querySelectorAll('#runs tr').length >= {n} + 2", timeout=60_000)


WIDE = {"width": 1440, "height": 1000}


def open_page(browser, url: str, rows: int, *, analyzed: int | None = None, bars: int | None = None, viewport=WIDE):
    """A new page on *url* once the runs table has *rows* rows, the progress line counts *analyzed* runs
    and the Policies tab draws *bars* policy rows (each when given); ``viewport=None``: Playwright's own
    (1280 x 720)."""
    page = browser.new_page(viewport=viewport) if viewport else browser.new_page()
    page.goto(url)
    wait_rows(page, rows)
    if analyzed is not None:
        page.wait_for_function(
            f"document.querySelector('#progress').innerText.includes('{analyzed} run(s)')", timeout=120_000
        )
    if bars is not None:
        page.wait_for_function(f"document.querySelectorAll('#policy-bars .row-label').length == {bars}", timeout=60_000)
    return page


def wait_graph(page, graph_id: str, condition: str = "gd.data.length > 0") -> None:
    page.wait_for_function(
        f"(() => {{ const gd = document.querySelector('#{graph_id} .js-plotly-plot');"
        f" return gd && gd.data && ({condition}); }})()",
        timeout=60_000,
    )


# The runs table: its column names stay on top when its box scrolls, and its ticked rows are in view
RUNS_TABLE_JS = """
() => {
  const box = document.querySelector('#runs .dash-spreadsheet-container');
  const head = document.querySelector('#runs tr th.dash-header');
  if (!box || !head) return ['no runs table'];
  const out = [];
  const inView = e => { const r = e.getBoundingClientRect(), b = box.getBoundingClientRect();
                        return r.top >= b.top - 1 && r.bottom <= b.bottom + 1; };
  const ticked = [...box.querySelectorAll('tr')].filter(tr => tr.querySelector('input:checked'));
  if (ticked.length && !ticked.some(inView)) out.push('no ticked row in view');
  const at = box.scrollTop;
  box.scrollTop = box.scrollHeight;
  const gap = head.getBoundingClientRect().top - box.getBoundingClientRect().top;
  if (Math.abs(gap) > 1) out.push(`scrolled, the header is ${gap}px from the top of its box`);
  box.scrollTop = at;
  return out;
}
"""


def console_problems(page) -> list[str]:
    """The page's own console errors and warnings (plotly.js logs its warnings as console.trace
    "WARN: ..."), and uncaught errors."""
    out = [f"{m.type}: {m.text}" for m in page.console_messages() if m.type in ("error", "warning")]
    out += [f"{m.type}: {m.text}" for m in page.console_messages() if m.text.startswith(("WARN", "ERROR"))]
    return out + [f"page error: {e}" for e in page.page_errors()]


# traces drawn as another type than asked: plotly draws a type its bundle lacks as a scatter, silently
# (the dashboard serves the cartesian bundle: dashboards/plotly_bundle.py)
UNDRAWN_TYPES_JS = """[...document.querySelectorAll('.js-plotly-plot')].flatMap(gd => (gd.data || [])
  .map((t, i) => [t.type || 'scatter', ((gd._fullData || [])[i] || {}).type])
  .filter(([asked, drawn]) => asked !== drawn))"""


# the shown tables wider than their box (they would scroll sideways), as [id or class, needed px, box px]
WIDE_TABLES_JS = """[...document.querySelectorAll('.dash-spreadsheet-container, table')]
  .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 2)
  .map(e => [e.id || e.className.slice(0, 40), e.scrollWidth, e.clientWidth])"""
LAPTOP = {"width": 1344, "height": 900}  # the narrowest window every table fits


def wide_tables(page) -> list[list]:
    """The shown tables that scroll sideways in a LAPTOP-wide window (the page put back as it was)."""
    was = page.viewport_size
    page.set_viewport_size(LAPTOP)
    page.wait_for_timeout(200)
    try:
        return page.evaluate(WIDE_TABLES_JS)
    finally:
        page.set_viewport_size(was)


def check_page(page, name: str) -> None:
    """No overlapping labels, no silent empty chart, no trace drawn as another type, no console error or
    warning, the runs table's header in place and a ticked row in view, no table scrolling sideways in a
    1344-pixel window; and a screenshot for review."""
    page.wait_for_timeout(300)  # let plotly finish laying out its text
    assert wide_tables(page) == [], name
    assert page.evaluate(OVERLAPS_JS) == [], name
    assert page.evaluate(UNDRAWN_TYPES_JS) == [], name
    assert page.evaluate(EMPTY_JS) == [], name
    assert console_problems(page) == [], name
    assert page.evaluate(RUNS_TABLE_JS) == [], name
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}.png"), full_page=True)


def pick(page, dropdown: str, text: str) -> None:
    page.click(f"#{dropdown}")
    page.get_by_text(text, exact=True).last.click()


def bar_units(page) -> tuple[float, float]:
    """The divisors of the Policies bars' time and size units (``data-value`` is in them)."""
    units = page.evaluate(
        "(() => { const g = document.querySelector('#policy-bars .bars'); "
        "return [g.dataset.timeUnit, g.dataset.sizeUnit]; })()"
    )
    return DIVISORS[units[0]], DIVISORS[units[1]]


def unit_of(title: str) -> float:
    """The divisor of the unit a title states: ``copy time (ms):`` -> 1e6."""
    unit = title.split("(", 1)[1].split(")", 1)[0]
    return DIVISORS[unit]
