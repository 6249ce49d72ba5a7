"""The library view and the episode view (src/skillrepro/studies/speedrunner/views.py, rules/speedrunner/views.smk), and the report that
bundles them with the tables and figures.

Three sources of records, all real: a batch played by the real runner and sandbox with the shipped reference
library and a scripted actor that does call the skill (so the call counts are not zero); the reference
method's run through the DAG on the real model in tests/workflow/test_reference_workflow.py, which makes the
pages with the real rules and hands them to `check_pages_of_the_workflow_run` (tests/pages.py): the pages are
rendered in headless Chromium and checked against that run's records; and the smallest ReAct + SpeedRunner run
through the whole DAG (`tiny_run`, tests/data/tiny.yaml), whose `snakemake --report` is clicked through section
by section in headless Chromium (tests/pages.py; tests/cdp.py drives it), failing on any console error."""
from __future__ import annotations

import html
import json
import uuid
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from skillrepro.studies.speedrunner import views
from skillrepro.agent import EpisodeSpec
from skillrepro.benchmarks import get_benchmark
from skillrepro.config import BenchmarkConfig, LLMConfig, MethodConfig
from skillrepro.llm.client import Reply
from skillrepro.methods import get_method, bind
from skillrepro.runner import run_batch
from skillrepro.skills import Library, parse_functions
from skillrepro.store import LLMCall
from pages import assert_not_blank, click_through_report, screenshot

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
              out_dir=root / "eval/v0", method=bind(MethodConfig("reference", "reference")), client=WrongThenSkill())
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
    assert "First version: 0 functions." in page and "Unchanged from v0." in page
    assert "No functions: the run starts from an empty library." in page
    assert "data:image/png" not in page and page.count("Call graph: none (no functions).") == 2


def empty_use() -> pd.DataFrame:
    frames = pd.DataFrame(columns=[f for f in views.store.SkillCall.__dataclass_fields__])
    return views.function_use(frames, pd.DataFrame(columns=["episode_id", "library_version", "success"]))


def test_a_paper_scale_library_page_fits_its_size_by_listing_fewer_functions():
    """Voyager's final library in table 8 has 909 functions; a rehearsal of configs/paper.yaml found its page 605 KB
    at the smallest limits (over page_kb's 150: the job failed). Past the texts' floor the functions tables list
    fewer rows, the ones evaluation called first, and say so."""
    source = "\n\n".join(f'def skill_{i}():\n    """Skill {i}: reach goal {i} of the curriculum."""\n    return {i}\n'
                           for i in range(911))
    functions = parse_functions(source)
    libs = [Library(v, functions[:n]) for v, n in enumerate((909, 910, 911))]
    frames = pd.DataFrame([{"frame_id": "0", "parent_frame_id": "", "episode_id": "e0", "step": 0,
                            "function": "skill_3", "arguments": "{}", "primitives": "[]", "return_value": "3",
                            "exception": "", "duration_s": 0.01}])
    use = views.function_use(frames, pd.DataFrame([{"episode_id": "e0", "library_version": 2, "success": True}]))
    limits = views.ViewLimits(**{**vars(LIMITS), "page_kb": 150})
    page = views.fit(lambda lim: views.library_page(views.RunRecords("crafter/voyager/seed0", (), ()), libs, use,
                                                    [0, 2], lim), limits)
    assert len(page.encode()) <= 150 * 1024
    assert "functions listed: those the evaluation called first, then the newest (all of them: v2/skills.py)" in page
    v2 = page.split("<h2 id='v2'>")[1]
    assert "id='v2-skill_3'" in v2 and "id='v2-skill_910'" in v2 and "id='v2-skill_500'" not in v2
    assert "data:image/png" not in page and "Call graph: not drawn: 911 functions, more than the 200" in v2


def test_an_empty_library_page_lists_the_writes_its_sleep_phases_refused_and_why(tmp_path):
    """Each method's transcript as it writes it (speedrunner_session.py, common.save_records for ASI and Voyager): the
    page of a library that stayed empty says why at the top, and under each version lists every refused write
    with its reason and code; writes kept and other tools are counted, not listed."""
    sr = tmp_path / "speedrunner/induce/v1/transcript.jsonl"
    sr.parent.mkdir(parents=True)
    lines = [
        {"request": 0, "tool": "execute_code", "code": "show('select 1')", "observation": "1"},
        {"request": 1, "tool": "write_function", "code": "def  # a function that", "public": True,
         "observation": "Error: the code does not parse: invalid syntax (line 1). Nothing was saved."},
        {"request": 2, "tool": "write_function", "code": "def go(x):\n    return undefined_name(x)", "public": True,
         "observation": "Error: not saved, the check failed: the library does not load: NameError: undefined_name"},
        {"request": 3, "tool": "", "code": "", "observation": "Error: no tool call found. Reply with ..."},
        {"request": 4, "error": "the context overflowed"},
    ]
    sr.write_text("".join(json.dumps(t) + "\n" for t in lines))
    asi = tmp_path / "asi/induce/v2/transcript.jsonl"
    asi.parent.mkdir(parents=True)
    asi.write_text(json.dumps({"episode_id": "e1", "added": [], "refused": [
        "toggle: the name is taken (append-only)", "no code in the reply"]}) + "\n")

    phases = views.RunRecords("babyai/speedrunner/seed0", (), (), (sr,)).sleep_phases()
    assert list(phases) == [1] and phases[1].saved == 0 and phases[1].entries == 5
    assert [(what, why) for what, why, _ in phases[1].refused] == [
        ("no function named (def  # a function that)", "the code does not parse: invalid syntax (line 1). Nothing was saved."),
        ("go", "not saved, the check failed: the library does not load: NameError: undefined_name")]
    libs = [Library(0, meta={"method": "init"}), Library(1, meta={"method": "speedrunner"})]
    page = views.library_page(views.RunRecords("babyai/speedrunner/seed0", (), ()), libs, empty_use(), [0, 1], LIMITS,
                              phases)
    assert "No version of this library has a function:</b> its sleep phases refused 2 writes" in page
    assert "No functions." not in page  # every empty version says why
    assert ("No functions: the sleep phase that made v1 (method speedrunner) kept none; it refused "
            "<a href='#refused-v1'>2 writes</a>") in page
    table = page.split("id='refused-v1'")[1].split("</table>")[0]
    assert "NameError: undefined_name" in table and "invalid syntax (line 1)" in table
    assert "return undefined_name(x)" in table  # the code that was refused
    assert "writes kept 0, refused 2; also execute_code x1; a reply that named no tool x1; request 4 failed: " \
           "the context overflowed." in page

    asi_phases = views.RunRecords("babyai/asi/seed0", (), (), (asi,)).sleep_phases()
    assert asi_phases[2].refused == (("toggle", "the name is taken (append-only)", ""), ("-", "no code in the reply", ""))
    page = views.library_page(views.RunRecords("babyai/asi/seed0", (), ()),
                              [Library(0), Library(1, meta={"method": "asi"}), Library(2, meta={"method": "asi"})],
                              empty_use(), [0, 2], LIMITS, {1: views.SleepPhase(0, 0, (), ()), **asi_phases})
    assert "No functions: the sleep phase that made v1 (method asi) recorded nothing and wrote no function." in page
    assert "<a href='#refused-v2'>2 writes</a>" in page and "the name is taken (append-only)" in page



def write_transcript(path: Path, lines: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((t if isinstance(t, str) else json.dumps(t)) + "\n" for t in lines))
    return path


def request(n: int, tool: str, code: str, observation: str, reply: str | None = None, **more) -> dict:
    """A line as SpeedRunner writes it (speedrunner_session.py, transcript.append)."""
    return {"request": n, "prefill": "", "reply": reply if reply is not None else
            json.dumps({"name": tool, "arguments": {"code": code}}), "tool": tool, "code": code, "public": None,
            "target": "", "observation": observation, "tool_s": 0.25, "prompt_tokens": 900 + n,
            "completion_tokens": 40 + n, **more}


def test_a_sleep_phase_page_shows_each_request_its_reply_tool_code_output_and_verdict(tmp_path):
    """Every request of a SpeedRunner sleep phase in order: the reply as the model wrote it, the cell and its
    output, each write's code and the check's verdict (kept, or refused and why), the other tools' answers and
    a request that failed."""
    lines = [
        request(0, "execute_code", "show('SELECT task_id, success FROM episodes')",
                "task_id success\nbabyai-7 False\nbabyai-9 True"),
        request(1, "write_function", "def go_to(", "Error: the code does not parse: '(' was never closed (line 1). "
                "Nothing was saved.", reply="Action: write_function(public=True)\n```python\ndef go_to(\n```"),
        request(2, "write_function", "def forward():\n    return forward()",
                "Error: forward would hide a primitive action of the same name. Nothing was saved.", public=True),
        request(3, "write_function", "def face_ball():\n    \"\"\"Turn to the ball.\"\"\"\n    return turn_left()",
                "Saved face_ball (public). Library: face_ball.", public=True),
        request(4, "read_library", "", "def face_ball():\n    ..."),
        request(5, "delete_function", "", "Error: no function 'go_to'; the library has: face_ball.", target="go_to"),
        request(6, "", "", "Error: no tool call found. Reply with Action: ...", reply="I think the agent should..."),
        {"request": 7, "error": "the context overflowed: 9000 tokens > 8192"},
    ]
    transcript = write_transcript(tmp_path / "induce/v1/transcript.jsonl", lines)
    entries = views.read_transcript(transcript)
    before, made = Library(0, meta={"method": "init"}), Library(1, meta={"method": "speedrunner"})
    made = made.next_version(functions=parse_functions(lines[3]["code"]))
    made = Library(1, made.functions, meta={"method": "speedrunner"})
    page = views.sleep_page("babyai/speedrunner/seed0", entries, before, made, "../library.html", LIMITS)
    assert views.sleep_page_name("babyai/speedrunner/seed0", 1) == "sleep.babyai.speedrunner.seed0.v1.html"
    assert "Sleep phase v0 &rarr; v1 of babyai/speedrunner/seed0" in page
    assert "<a href='../library.html#v1'>v1</a> (method speedrunner): v0 had 0 functions, v1 has 1: added face_ball" in page
    assert "8 transcript entries; writes kept 1, refused 2" in page
    # each request in order, each with its anchor and a row in the table of what it came to
    at = [page.index(f"<div class='request' id='request-{n}'>") for n in range(8)]
    assert at == sorted(at) and page.count("<div class='request'") == 8
    for n in range(8):
        assert f"<a href='#request-{n}'>{n}</a>" in page
    blocks = page.split("<div class='request'")[1:]
    cell = blocks[0]
    assert "<code>execute_code</code>" in cell and "<h4>Cell</h4>" in cell
    assert html.escape("show('SELECT task_id, success FROM episodes')") in cell
    assert "<h4>Output</h4><pre>task_id success\nbabyai-7 False\nbabyai-9 True</pre>" in cell
    assert html.escape(json.dumps({"name": "execute_code", "arguments": {"code": lines[0]["code"]}})) in cell  # the reply
    assert "900 prompt tokens; 40 output tokens; the tool took 0.25 s" in cell
    parse = blocks[1]
    assert "<span class=bad>refused</span>" in parse and "refused, and why" in parse
    assert "the code does not parse: &#x27;(&#x27; was never closed (line 1)" in parse
    assert "Action: write_function(public=True)\n```python\ndef go_to(\n```" in parse  # the raw text reply
    assert "would hide a primitive action of the same name" in blocks[2] and "Code written (public)" in blocks[2]
    kept = blocks[3]
    assert "<span class=kept>kept</span>" in kept and "Saved face_ball (public). Library: face_ball." in kept
    assert "&quot;&quot;&quot;Turn to the ball.&quot;&quot;&quot;" in kept  # the code written
    assert "<code>read_library</code>" in blocks[4] and "<h4>Observation</h4>" in blocks[4]
    assert "Target: <code>go_to</code>" in blocks[5] and "no function &#x27;go_to&#x27;" in blocks[5]
    assert "no tool called" in blocks[6] and "I think the agent should..." in blocks[6]
    assert "Request 7: <span class=bad>failed</span>" in blocks[7]
    assert "the context overflowed: 9000 tokens &gt; 8192" in blocks[7]
    table = page.split("<table class='requests'>")[1].split("</table>")[0]
    assert "kept: Saved face_ball (public)" in table and "refused: forward would hide a primitive" in table
    assert "failed: the context overflowed" in table
    assert "Shortened" not in page


def test_a_paper_scale_sleep_phase_fits_its_page_with_every_request_shown(tmp_path):
    """100 requests whose cells, outputs and replies are long: every request keeps its place on the page, the
    texts are shortened until the page is under page_kb, and the page says so."""
    limits = views.ViewLimits(**{**vars(LIMITS), "text_chars": 1000, "page_kb": 150})
    lines = []
    for n in range(100):
        code = f"# cell {n}\n" + "show('SELECT * FROM steps')\n" * 80
        if n % 2:
            lines.append(request(n, "execute_code", code, "row " * 2000 + f"END{n}"))
        else:
            lines.append(request(n, "write_function", f"def f{n}():\n" + "    turn_left()\n" * 150,
                                 f"Error: not saved, the check failed: {'x' * 3000}"))
    entries = views.read_transcript(write_transcript(tmp_path / "induce/v3/transcript.jsonl", lines))
    page = views.fit(lambda lim: views.sleep_page("babyai/speedrunner/seed0", entries, Library(2), Library(3),
                                                  "lib.html", lim), limits, views.sleep_shortened)
    assert len(page.encode()) <= 150 * 1024
    for n in range(100):
        assert f"id='request-{n}'" in page and (f"# cell {n}\n" in page if n % 2 else f"def f{n}():" in page)
    assert "more characters)" in page  # each long text says how much of it was left out
    assert "Shortened to fit analysis.views.page_kb = 150: at most" in page and "transcript entries" in page
    assert "entries not shown" not in page
    # A phase far over paper scale still fits: only its first and last entries are shown, and the page says so.
    huge = [request(n, "read_library", "", "def f(): ...\n" * 20) for n in range(3000)]
    page = views.fit(lambda lim: views.sleep_page("babyai/speedrunner/seed0", huge, Library(2), Library(3),
                                                  "lib.html", lim), limits, views.sleep_shortened)
    assert len(page.encode()) <= 150 * 1024 and "id='request-0'" in page and "id='request-2999'" in page
    assert "entries not shown" in page


def test_a_sleep_phase_page_shows_other_methods_transcripts_as_written(tmp_path):
    """ASI's, Voyager's and OPO's transcript lines (common.save_records) are shown by their keys and values; an
    empty transcript says there was no sleep phase work."""
    lines = [
        {"episode_id": "babyai/asi/seed0/c0/e1", "task_id": "t1", "reply": "```python\ndef toggle(): ...\n```",
         "added": [], "refused": ["toggle: the name is taken (append-only)"]},
        {"episode_id": "babyai/voyager/seed0/c0/e2", "skipped": "no curriculum goal recorded"},
        {"request": 0, "episodes": 4, "reply": "Notes: open doors first.", "notes_changed": True},
        "not json {",
    ]
    entries = views.read_transcript(write_transcript(tmp_path / "induce/v1/transcript.jsonl", lines))
    assert entries[-1] == {"line": "not json {"}
    page = views.sleep_page("babyai/asi/seed0", entries, Library(0), Library(1, meta={"method": "asi"}), "l.html",
                            LIMITS)
    assert "writes kept 0, refused 1" in page and page.count("<table class='entry'>") == 4
    for key in ("episode_id", "task_id", "added", "refused", "skipped", "episodes", "notes_changed", "line"):
        assert f"<th>{key}</th>" in page
    assert "toggle: the name is taken (append-only)" in page and "no curriculum goal recorded" in page
    assert "Notes: open doors first." in page and "not json {" in page
    empty = views.sleep_page("babyai/react/seed0", [], Library(0), Library(1), "l.html", LIMITS)
    assert "No sleep phase work: the transcript is empty." in empty


def test_the_library_page_links_each_sleep_phase_page_or_says_there_was_no_sleep_phase_work(tmp_path):
    sr = write_transcript(tmp_path / "induce/v1/transcript.jsonl",
                          [request(0, "finish", "", "Finished.")])
    libs = [Library(0), Library(1, meta={"method": "speedrunner"})]
    phases = views.RunRecords("babyai/speedrunner/seed0", (), (), (sr,)).sleep_phases()
    page = views.library_page(views.RunRecords("babyai/speedrunner/seed0", (), ()), libs, empty_use(), [0, 1],
                              LIMITS, phases, "../sleep/babyai/speedrunner/seed0")
    href = "href='../sleep/babyai/speedrunner/seed0/sleep.babyai.speedrunner.seed0.v1.html'"
    assert page.count(href) == 2  # in the table of versions and under v1
    assert f"<a class='sleep-page' {href}>v0 &rarr; v1</a>" in page
    # react: its sleep phase (carry_library) writes an empty transcript and gets no page
    carry = write_transcript(tmp_path / "react/induce/v1/transcript.jsonl", [])
    phases = views.RunRecords("babyai/react/seed0", (), (), (carry,)).sleep_phases()
    page = views.library_page(views.RunRecords("babyai/react/seed0", (), ()), libs, empty_use(), [0, 1], LIMITS,
                              phases, None)
    assert "sleep-page" not in page and "sleep.babyai" not in page
    assert "<td>no sleep phase work</td>" in page and "Sleep phase v0 &rarr; v1: no sleep phase work." in page


def test_a_page_over_its_size_cap_is_made_smaller_or_refused():
    long = lambda lim: "<body>" + "x" * (lim.text_chars * 40) + "</body>"  # noqa: E731
    page = views.fit(long, views.ViewLimits(**{**vars(LIMITS), "page_kb": 16}))
    assert len(page.encode()) <= 16 * 1024 and "Shortened to fit analysis.views.page_kb = 16" in page
    with pytest.raises(views.PageTooLarge, match="analysis.views.page_kb"):
        views.fit(lambda lim: "<body>" + "x" * 20_000 + "</body>", views.ViewLimits(**{**vars(LIMITS), "page_kb": 16}))


@pytest.mark.workflow
def test_every_section_of_the_report_opens_and_an_empty_library_says_why(tiny_run):
    wd, _ = tiny_run  # tests/data/tiny.yaml run through `snakemake all`, with its report (conftest.py)
    opened = click_through_report(wd / "report.html", wd / "shots")
    # landing page: the main table and each figure, and each section; Tables: 9 (terminations.csv among them);
    # Episodes: two pages per run (v0, v2);
    # Sleep phases: SpeedRunner's two (react's sleep phases do no work and get no page)
    assert opened["landing page"] == 2 + 8 + 4 and opened["Tables"] == 9 and opened["Figures"] == 8
    assert opened["Libraries"] == 2 and opened["Episodes"] == 4 and opened["Sleep phases"] == 2
    for shot in ("Libraries", "Episodes_babyai_speedrunner_seed0", "Sleepphases"):
        assert_not_blank((wd / "shots" / f"{shot}.png").read_bytes())
    # the zip: the same report, with each result a file beside it
    zipped = click_through_report(wd / "unzipped/report/report.html", wd / "shots-zip")
    assert zipped == opened, (zipped, opened)

    # Each library page says what its sleep phase did; a write it refused is listed with the reason it got.
    for variant in ("react", "speedrunner"):
        page = (wd / f"results/views/library/library.babyai.{variant}.seed0.html").read_text()
        run = wd / f"results/runs/babyai/{variant}/seed0"
        lines = [json.loads(t) for t in (run / "induce/v1/transcript.jsonl").read_text().splitlines() if t.strip()]
        refused = [t for t in lines if t.get("tool") == "write_function" and not t["observation"].startswith("Saved")]
        assert f"Sleep phase that made v1: {len(lines)} transcript entr" in page
        assert f"refused {len(refused)}" in page
        for t in refused:
            assert html.escape(t["observation"].removeprefix("Error: "), quote=True)[:200] in page
        if not any(json.loads((run / f"library/v{v}/manifest.json").read_text())["functions"] for v in (1, 2)):
            assert "No version of this library has a function:" in page and "<p>No functions.</p>" not in page
        # ... and links the page of the sleep phase that made v1, which shows each of its requests
        sleep = wd / f"results/views/sleep/babyai/{variant}/seed0"
        if variant == "react":
            assert not sleep.exists() and "sleep-page" not in page and "<td>no sleep phase work</td>" in page
            continue
        assert sorted(p.name for p in sleep.glob("*.html")) == [f"sleep.babyai.speedrunner.seed0.v{v}.html" for v in (1, 2)]
        assert "href='../sleep/babyai/speedrunner/seed0/sleep.babyai.speedrunner.seed0.v1.html'" in page
        phase = (sleep / "sleep.babyai.speedrunner.seed0.v1.html").read_text()
        assert "href='../../../../library/library.babyai.speedrunner.seed0.html#v1'" in phase
        assert phase.count("<div class='request'") == len(lines) >= 1
        for t in lines:
            block = phase.split(f"id='request-{t['request']}'>")[1].split("<div class='request'")[0]
            if "error" in t:
                assert html.escape(t["error"], quote=True)[:100] in block
                continue
            assert html.escape(t["reply"], quote=True)[:200] in block  # the raw text or the JSON call
            # a reply that names no tool (SmolLM2's, now and then) is shown as such, with what it was told
            assert (f"<code>{t['tool']}</code>" if t["tool"] else "<span class=bad>no tool called</span>") in block
            assert html.escape(t["observation"], quote=True)[:200] in block
            if t["tool"] == "write_function":
                kept = t["observation"].startswith("Saved")
                assert ("<span class=kept>kept</span>" if kept else "<span class=bad>refused</span>") in block
                assert html.escape(t["code"], quote=True)[:200] in block
    assert_not_blank(screenshot(sleep / "sleep.babyai.speedrunner.seed0.v1.html", wd / "sleep.png"))

