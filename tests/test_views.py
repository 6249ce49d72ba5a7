"""The library view and the episode view (src/skillrepro/views.py, rules/views.smk).

Two sources of records, both real: a batch played by the real runner and sandbox with the shipped reference
library and a scripted actor that does call the skill (so the call counts are not zero), and the reference
method's run through the DAG on the real model in tests/test_reference_workflow.py, which makes the pages with
the real rules and hands them to `check_pages_of_the_workflow_run` here: the pages are rendered in headless
Chromium and checked against that run's records."""
from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from skillrepro import views
from skillrepro.agent import EpisodeSpec
from skillrepro.benchmarks import get_benchmark
from skillrepro.config import BenchmarkConfig, LLMConfig, MethodConfig
from skillrepro.llm.client import Reply
from skillrepro.methods import get_method
from skillrepro.runner import run_batch
from skillrepro.skills import Library, parse_functions
from skillrepro.store import LLMCall

BABYAI = BenchmarkConfig(name="babyai", env="babyai", llm_call_budget=3)
LIMITS = views.ViewLimits(episodes_per_run=3, steps_per_episode=40, frames_per_step=20, text_chars=1000,
                          diff_lines=100, graphs_per_run=4, page_kb=200)
EXTRA = 'def look_twice() -> str:\n    """Look around twice."""\n    return solve_mission("go to the red ball")\n'


class WrongThenSkill:
    """Step 0 names no action the actor has; step 1 calls solve_mission with the mission it was given."""

    def chat(self, messages, *, role, session_id, tools=None, max_tokens=None, stop=None, seed=0, extra_body=None):
        mission = messages[1]["content"].splitlines()[0].removeprefix("Mission: ")
        first = sum(m["role"] == "assistant" for m in messages) == 0
        text = "Thought: dance.\nAction: dance()" if first else f'Thought: the skill.\nAction: solve_mission("{mission}")'
        rec = LLMCall(uuid.uuid4().hex, session_id, role, "fake", "fake", 100, 40, 12, 0, 0.01, 0, "stop", "0" * 64,
                      json.dumps({"messages": messages}), json.dumps({"content": text}), 0.0)
        return Reply(text, [], "stop", rec)


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory) -> views.RunRecords:
    """Library v0 (the shipped reference library) and v1 (one function more), two test episodes at v0."""
    root = tmp_path_factory.mktemp("views") / "results/runs/babyai/reference/seed0"
    ref = get_method("reference")
    v0 = ref.initial(BABYAI, ref.parse_options({}, "reference"))
    v0.write(root / "library/v0")
    v0.next_version(functions=v0.functions + parse_functions(v0.source + "\n\n" + EXTRA)[-1:]).write(root / "library/v1")
    tasks = get_benchmark("babyai").sample_tasks("test", 2, 42)
    run_batch(bench=BABYAI, llm=LLMConfig(), library_dir=root / "library/v0", task_ids=tasks,
              spec=EpisodeSpec("babyai/reference/seed0", "babyai", "reference", "reference", 0, "test", 0, 0),
              out_dir=root / "eval/v0", method=MethodConfig("reference", "reference"), client=WrongThenSkill())
    return views.RunRecords("babyai/reference/seed0", (root / "library/v0", root / "library/v1"), (root / "eval/v0",))


def test_the_library_page_counts_what_the_records_hold(scripted_run):
    libraries, episodes, steps, frames, calls = scripted_run.tables({})
    use = views.function_use(frames, episodes).set_index("function")
    records = pq.read_table(scripted_run.eval_dirs[0] / "skill_calls.parquet").to_pandas()
    roots = records[records.parent_frame_id == ""]
    assert len(roots) == 2 and set(roots.function) == {"solve_mission"}  # one call per episode, at step 1
    assert set(roots.step) == {1}
    nested = records[records.parent_frame_id != ""]
    assert len(nested) > 0, "the reference library calls its private helpers: nested frames"
    assert use.loc["solve_mission", "calls"] == 2 and use.loc["solve_mission", "episodes"] == 2
    # Primitives per call of the top function: every primitive of its whole call tree.
    every = sum(len(json.loads(p)) for p in records.primitives)
    assert use.loc["solve_mission", "primitives_per_call"] == pytest.approx(every / 2)
    assert use.loc["solve_mission", "success"] == pytest.approx(episodes.success.mean())
    assert use.calls.sum() == len(records) and use.errors.sum() == (records.exception != "").sum()

    page = views.library_page(scripted_run, libraries, views.function_use(frames, episodes), [0], LIMITS)
    for f in libraries[0].functions:
        assert f"id='v0-{f.name}'" in page and f"id='v1-{f.name}'" in page
    assert "From v0: added look_twice; removed none; edited none." in page
    assert page.count("data:image/png;base64,") == 2  # v0's graph and v1's (a new node and edge)
    assert "<td colspan='5' class='note'>not evaluated</td>" in page  # v1 has no checkpoint


def test_an_episode_page_shows_its_steps_and_nested_call_stack(scripted_run):
    libraries, episodes, steps, frames, calls = scripted_run.tables({})
    ep = views.sample_episodes(episodes, 1).iloc[0]
    mine = lambda df: df[df.episode_id == ep.episode_id]  # noqa: E731
    every = views.ViewLimits(**{**vars(LIMITS), "frames_per_step": 10_000})
    page = views.episode_page(ep, mine(steps), mine(frames), mine(calls), libraries[0], "../library.html", every)
    assert "Action: dance()" in page and "<span class=bad>invalid</span>" in page  # step 0 as the actor wrote it
    first = json.loads(mine(calls).sort_values("started_at").prompt.iloc[0])["messages"][1]["content"]
    assert first.splitlines()[0] in page  # the task (its mission line)
    assert page.count("<li class='frame'>") == len(mine(frames)) and "<ul><li class='frame'>" in page
    assert page.count("<ul>") > 1, "nested frames are nested lists"
    assert "href='../library.html#v0-solve_mission'" in page and "id='fn-solve_mission'" in page
    capped = views.episode_page(ep, mine(steps), mine(frames), mine(calls), libraries[0], "x.html", LIMITS)
    assert capped.count("<li class='frame'>") == LIMITS.frames_per_step < len(mine(frames))
    assert "more calls not shown (analysis.views.frames_per_step)" in capped
    # At the smallest step budget only the first and last step stay, and the page says what it left out.
    short = views.episode_page(ep, mine(steps), mine(frames), mine(calls), libraries[0], "x.html",
                               views.ViewLimits(**{**vars(LIMITS), "steps_per_episode": 1}))
    assert "Step 0" in short and "Step 1" not in short and "1 steps not shown" in short


def test_a_library_without_functions_has_a_page_too():
    """ReAct's library: no function in any version, nothing called."""
    empty = pd.DataFrame(columns=[f for f in views.store.SkillCall.__dataclass_fields__])
    use = views.function_use(empty, pd.DataFrame(columns=["episode_id", "library_version", "success"]))
    page = views.library_page(views.RunRecords("babyai/react/seed0", (), ()), [Library(0), Library(1)], use, [0, 1],
                              LIMITS)
    assert "First version: 0 functions." in page and "Unchanged from v0." in page and "No functions." in page
    assert "data:image/png" not in page and page.count("Call graph: none (no functions).") == 2


def test_a_page_over_its_size_cap_is_made_smaller_or_refused():
    long = lambda lim: "<body>" + "x" * (lim.text_chars * 40) + "</body>"  # noqa: E731
    page = views.fit(long, views.ViewLimits(**{**vars(LIMITS), "page_kb": 16}))
    assert len(page.encode()) <= 16 * 1024 and "Shortened to fit analysis.views.page_kb = 16" in page
    with pytest.raises(views.PageTooLarge, match="analysis.views.page_kb"):
        views.fit(lambda lim: "<body>" + "x" * 20_000 + "</body>", views.ViewLimits(**{**vars(LIMITS), "page_kb": 16}))


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
    """The pages the real rules made for the reference run of tests/test_reference_workflow.py (`snakemake` runs
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
