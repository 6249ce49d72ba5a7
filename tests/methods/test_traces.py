"""The one renderer of recorded episodes every sleep phase reads (OPO, ASI, Voyager, SpeedRunner without its
interpreter): whole observations, the skill call stacks, one token budget from the config."""
from __future__ import annotations


from skillrepro.agent import EpisodeSpec
from skillrepro.config import BenchmarkConfig, LLMConfig
from skillrepro.methods.common import TOKEN_CHARS, Trace, estimate_tokens, read_traces, render_traces, show_traces
from skillrepro.runner import run_batch
from skillrepro.skills import Library, parse_functions
from skillrepro.benchmarks import load_benchmark
from repo import ROOT
from scripted import Fake

SKILLS = '''
def outer():
    """Turn around by way of a helper."""
    inner()
    return inner()

def inner():
    """One left turn."""
    return turn_left()
'''


def test_recorded_call_stacks_and_whole_observations_reach_the_text(tmp_path):
    bench = BenchmarkConfig("babyai", "babyai", llm_call_budget=3)
    Library(0, parse_functions(SKILLS)).write(tmp_path / "v0")
    actor = Fake(["Thought: use the skill.\nAction: outer()", "Thought: go.\nAction: go_forward()"])
    spec = EpisodeSpec("r", "babyai", "m", "m", 0, "train", 0, 0)
    run_batch(bench=bench, llm=LLMConfig(), library_dir=tmp_path / "v0", task_ids=load_benchmark(bench).sample_tasks("train", 1, 1),
              spec=spec, out_dir=tmp_path / "batch0", client=actor)
    (trace,) = read_traces([tmp_path / "batch0"])
    text = trace.render()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("|")]  # not a value's continuation
    assert lines[2].startswith("0. outer() -> ")
    # after the actor's step (its observation may span lines), its stack: outer at depth 0, then two inner
    # frames one level deeper, each with the primitive it issued
    at = next(i for i, line in enumerate(lines) if line.startswith("   call outer() -> "))
    assert at > 2 and lines[at + 1].startswith("      call inner() -> ")
    assert lines[at + 2].startswith("         turn_left() -> ")
    outer = sum(line.startswith("   call outer()") for line in lines)
    assert outer >= 1 and sum(line.strip().startswith("call inner()") for line in lines) == 2 * outer
    for action, args, obs in trace.steps:
        assert all(part in text for part in obs.splitlines())  # whole, not cut to a fixed length


def _trace(i: int, obs_chars: int) -> Trace:
    return Trace(f"e{i}", f"t{i}", 0, False, 0.0, "Mission: go to the red ball", [("go_forward", [], "x" * obs_chars)])


def test_the_budget_holds_and_an_episode_that_does_not_fit_keeps_its_start_and_end():
    traces = [_trace(i, 600) for i in range(10)]
    text, used = render_traces(traces, 500)
    assert used <= 500 and used == estimate_tokens(text)
    assert text.startswith("## Episode on task t9")  # newest first
    # older episodes are dropped whole, never cut in the middle, and the counts say so
    shown = show_traces(traces, 500)
    assert shown.text == text and "cut" not in text and text.count("## Episode") == shown.episodes_whole == 2
    assert (shown.episodes_cut, shown.episodes_dropped) == (0, 8)
    assert (shown.observations_whole, shown.observations_dropped) == (2 * 2, 8 * 2)  # the opening and one step
    big = Trace("e", "t", 0, True, 1.0, "Mission: the start", [("go_forward", [], "y" * 9000), ("done", [], "the end")])
    text, used = render_traces([big], 1000)
    assert used <= 1000 and "Mission: the start" in text and text.endswith("the end")
    assert "characters of this episode cut: budgets.trajectory_tokens reached" in text
    assert len(text) <= 1000 * TOKEN_CHARS


def test_a_cut_episode_is_named_in_the_record_and_no_room_shows_none():
    """The record names the episode shown cut, with how much of it was shown, and the cut names the limit that set
    the budget; a budget too small for even a cut episode's start and end shows none (it used to show the whole
    episode: its end was sliced from -0), counted as dropped."""
    big = Trace("e", "t", 0, True, 1.0, "Mission: the start", [("go_forward", [], "y" * 9000), ("done", [], "the end")])
    shown = show_traces([big], 1000, limit="the first message's room")
    assert "characters of this episode cut: the first message's room reached" in shown.text
    assert shown.record() | {"episode_id_cut": "e", "cut_chars_total": len(big.render())} == shown.record()
    assert shown.cut_chars_shown == len(shown.text.split("\n[...")[0]) + len(shown.text.rsplit("...]\n", 1)[1])
    tiny = show_traces([big], 40)
    assert "the end" not in tiny.text and len(tiny.text) <= 40 * TOKEN_CHARS
    assert (tiny.episodes_cut, tiny.episodes_dropped, tiny.episode_id_cut) == (0, 1, None)


def test_the_budget_fits_the_context_and_a_value_that_does_not_is_refused():
    import copy

    import pytest

    from skillrepro.check import check_config
    from skillrepro.config import ConfigError, load_yaml
    from skillrepro.studies.speedrunner.settings import trajectory_tokens

    base = load_yaml(ROOT / "config.yaml")
    # null: half of what the context leaves after a sleep-phase reply (the paper: as many episodes as fit)
    assert trajectory_tokens(check_config(base, check_files=False)) == (8192 - 256) // 2
    paper = load_yaml(ROOT / "configs/paper.yaml")  # GPT-5.4-mini's 400k context: 10 BabyAI episodes whole
    assert trajectory_tokens(check_config(paper, check_files=False, billing=False)) == (400_000 - 1024 - 8192) // 2  # less the reasoning room
    small = copy.deepcopy(base)
    small["llm"]["ctx_per_slot"] = 2048
    assert trajectory_tokens(check_config(small, check_files=False)) == (2048 - 256) // 2
    small["budgets"]["trajectory_tokens"] = 1500
    with pytest.raises(ConfigError, match="budgets.trajectory_tokens: 1500 tokens"):
        check_config(small, check_files=False)
