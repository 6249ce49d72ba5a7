"""The run's pages read as a user reads them, for the views' tests and the workflow runs that make the pages:
a page's screenshot in headless Chromium, the checks of the pages the reference method's run through the DAG
made (tests/workflow/test_reference_workflow.py hands its run to `check_pages_of_the_workflow_run`), and
Snakemake's report clicked through section by section (cdp.py drives the browser). A module beside
tests/conftest.py, so that those test modules share it without importing each other."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from cdp import Page

# ---------------------------------------------------------------------------------------- the workflow run
LIBRARY_PAGE = "results/views/library/library.babyai.reference.seed0.html"
EPISODE_PAGES = "results/views/episodes/babyai/reference/seed0"
VIEW_TARGETS = [LIBRARY_PAGE, EPISODE_PAGES]


def screenshot(page: Path, png: Path) -> bytes:
    """The page as headless Chromium draws it (a real browser: the HTML, CSS and inlined pictures)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "headless Chromium is needed (apt-get install chromium)"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1200,1600", f"--screenshot={png}", page.resolve().as_uri()],
                   check=True, capture_output=True, timeout=120)
    return png.read_bytes()


def assert_not_blank(png_bytes: bytes) -> None:
    from io import BytesIO

    import matplotlib.image as mpimg

    assert png_bytes[:8] == b"\x89PNG\r\n\x1a\n" and len(png_bytes) > 20_000
    pixels = mpimg.imread(BytesIO(png_bytes), format="png")
    assert pixels.std() > 0.02, "the screenshot is one colour"


def check_pages_of_the_workflow_run(wd: Path, snakemake) -> None:
    """The pages the real rules made for the reference run of tests/workflow/test_reference_workflow.py (`snakemake` runs
    the workflow there, with its config), then the report that bundles them."""
    run = wd / "results/runs/babyai/reference/seed0"
    library, folder = wd / LIBRARY_PAGE, wd / EPISODE_PAGES
    pages = sorted(folder.glob("*.html"))
    # One browser start for both pages: side by side in frames of one sheet.
    sheet = wd / "views.html"
    sheet.write_text("<body style='margin:0;display:flex'>" + "".join(
        f"<iframe src='{p.resolve().as_uri()}' style='width:596px;height:1596px;border:0'></iframe>"
        for p in (library, pages[0])) + "</body>")
    assert_not_blank(screenshot(sheet, wd / "views.png"))

    text = library.read_text()
    v0 = json.loads((run / "library/v0/manifest.json").read_text())
    for f in v0["functions"]:
        assert f"id='v0-{f['name']}'" in text and f"id='v1-{f['name']}'" in text
    assert "Unchanged from v0." in text  # reference carries its library over unchanged
    frames = pd.concat([pq.read_table(run / f"eval/v{k}/skill_calls.parquet").to_pandas() for k in (0, 1)])
    # The evaluated versions' tables count each function's calls in that version's episodes.
    row = text.split("id='v1-solve_mission'")[1].split("</tr>")[0]
    called = frames[(frames.function == "solve_mission") & frames.episode_id.str.contains("/c1/")]
    assert f"<td>{len(called)}</td>" in row

    episodes = pd.concat([pq.read_table(run / f"eval/v{k}/episodes.parquet").to_pandas() for k in (0, 1)])
    assert len(pages) == 2 and len(episodes) == 4  # episodes_per_run = 2 of the 2 x 2 test episodes
    steps = pd.concat([pq.read_table(run / f"eval/v{k}/steps.parquet").to_pandas() for k in (0, 1)])
    for page in pages:
        html = page.read_text()
        ep = next(e for e in episodes.itertuples() if e.episode_id in html)
        mine = steps[steps.episode_id == ep.episode_id]
        assert html.count("<div class='step'") == len(mine) == ep.n_steps
        for st in mine.itertuples():
            assert f"<h3>Step {st.step}: " in html
        assert "href='../../../../library/library.babyai.reference.seed0.html#v" in html

    # The report bundles both views under their own categories, and main.csv's caption links the library page.
    snakemake("results/tables/main.csv", *VIEW_TARGETS, "--report", "report.html")
    report = (wd / "report.html").read_text()
    assert '"Libraries"' in report and '"Episodes"' in report
    for name in [library.name, *(p.name for p in pages)]:
        assert f'"name": "{name}"' in report
    assert "The library view of each row" in report and "showResultInfo" in report
    # and every section of it opens (its two episode pages are the case that used to blank the report)
    opened = click_through_report(wd / "report.html", wd / "report-shots")
    assert opened["Libraries"] == 1 and opened["Episodes"] == 2


# ---------------------------------------------------------------------------------------- the report
# Marks the elements the clicks go to: by their text, and the rows of a section's table of results.
_HELPERS = """
window.__find = (sel, text) => [...document.querySelectorAll(sel)].find(a => a.textContent.trim() === text);
window.__rows = () => [...document.querySelectorAll('#app table tbody tr')].filter(tr => tr.querySelector('[role=group]'));
window.__shown = () => !!document.querySelector('#app') && document.querySelector('#app').innerText.trim().length > 0;
"""


def click_through_report(report: Path, shots: Path) -> dict[str, int]:
    """Snakemake's report opened in headless Chromium and read the way a newcomer does, by clicking: every link
    of the landing page, Workflow, Statistics and About, then every section of results (each category, and each
    subcategory of one that has several), in each section every entry's eye button (its page or picture; a
    table's downloads, so not clicked) and the first entry's "i" button (its caption). Fails on any console
    error or uncaught exception, on a report that shows nothing after a click, and on a section whose table
    does not show each of its results on a row of its own. Returns {section: entries}; screenshots in `shots`."""
    shots.mkdir(parents=True, exist_ok=True)
    opened: dict[str, int] = {}
    with Page() as page:
        def ok(where: str) -> None:
            assert not page.errors, f"{where}: {page.errors}"
            assert page.js("__shown()"), f"{where}: the report shows nothing"

        def to_menu() -> None:  # the "Results" breadcrumb, or the home one where there is none
            if page.js("app.state.navbarMode") != "menu":
                page.click("__find('#app nav ol a', 'Results') || document.querySelector('#app nav ol a')")
            assert page.js("app.state.navbarMode") == "menu"

        page.load(report.resolve().as_uri(), "typeof app !== 'undefined' && document.querySelector('#app a')")
        page.js(_HELPERS)
        page.settle(300)
        ok("the landing page")
        page.screenshot(shots / "landing.png")
        links = page.js("[...document.querySelectorAll('#app .prose a')].map(a => a.textContent.trim())")
        for text in links:
            page.click(f"__find('#app .prose a', {json.dumps(text)})")
            ok(f"the landing page's link {text}")
            state = page.js("app.state")
            if "." in text:  # a result: its entry opens, with its caption
                assert state["navbarMode"] == "resultinfo" and state["resultPath"].endswith("/" + text), state
            else:  # a section
                assert state["category"] == text and state["navbarMode"] in ("category", "subcategory"), state
            to_menu()
        opened["landing page"] = len(links)
        for item in ("Workflow", "Statistics", "About"):
            page.click(f"__find('#app ul a', {json.dumps(item)})")
            ok(item)
            to_menu()
        sections = page.js("Object.fromEntries(Object.entries(categories).map(([c, s]) => [c, Object.keys(s).sort()]))")
        for category, subcategories in sections.items():
            opened[category] = 0
            for sub in subcategories:
                where = category if len(subcategories) == 1 else f"{category} / {sub}"
                to_menu()
                page.click(f"__find('#app ul a', {json.dumps(category)})")
                ok(where)
                if len(subcategories) > 1:
                    page.click(f"__find('#app ul a', {json.dumps(sub)})")
                    ok(where)
                state = page.js("app.state")
                assert (state["navbarMode"], state["category"], state["subcategory"]) == ("subcategory", category, sub), state
                paths = page.js(f"categories[{json.dumps(category)}][{json.dumps(sub)}]")
                rows = page.js("__rows().length")
                assert rows == len(paths), f"{where}: {rows} rows for {len(paths)} results"
                for i in range(rows):
                    eye = f"__rows()[{i}].querySelectorAll('[role=group] a')[0]"
                    if page.js(f"{eye}.getAttribute('href')") != "#":
                        continue
                    page.click(eye)
                    ok(f"{where}, entry {i}")
                    state = page.js("app.state")
                    assert state["content"] in ("html", "img", "pdf") and state["resultPath"] in paths, state
                    if i == 0:
                        page.settle(400)
                        page.screenshot(shots / f"{where.replace('/', '_').replace(' ', '')}.png")
                page.click("__rows()[0].querySelectorAll('[role=group] a')[1]")
                ok(f"{where}, caption")
                assert page.js("app.state.navbarMode") == "resultinfo"
                opened[category] += rows
    return opened
