"""The KV-cache study's pieces: the actor's formatter hook on real ALFWorld games (scripted LLM), request
streams in lockstep, simulations per setting, per-step load, the server comparison, the static
shared-prefix table and the kvcache config section."""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.colors import to_rgba
from snakemake.utils import validate

from repo import ROOT
from scripted import ScriptedClient
from skillrepro.agent import EpisodeSpec
from skillrepro.studies.kvcache import figures
from skillrepro.studies.kvcache import formats as F
from skillrepro.studies.kvcache import replay as R
from skillrepro.studies.kvcache import study
from skillrepro.studies.kvcache.settings import KVConfig, Setting, games_note, is_placeholder
from skillrepro.studies.kvcache.actor import (AlfWorldFormatter, CachedTokensUnreported, StreamRequest, format_benchmark,
                                             run_format, walk_views)
from skillrepro.config import SCHEMAS, BenchmarkConfig
from skillrepro.progress import PROGRESS_LOGGER
from skillrepro.store import Episode, Step, write_records
from skillrepro.studies.kvcache.tokenizers import get_tokenizer

TOK = get_tokenizer("qwen2.5")
SPEC = EpisodeSpec("kvcache/skillrl/seed0", "alfworld", "kvcache", "skillrl", 0, "test", 0, 0)


@pytest.fixture(scope="module")
def alfworld():
    bench = format_benchmark(BenchmarkConfig("alfworld", "alfworld"))
    return bench, bench.sample_tasks("test", 3, 42)


def qwen_ids(messages):
    return TOK.encode(F.render_chatml(messages))


def test_formatter_rebuilds_every_prompt_and_records_token_ids(alfworld):
    bench, tasks = alfworld
    env = bench.make(tasks[0])
    env.reset()
    first_room = env.feedback
    target = next(a for a in env.admissible_actions if a.startswith("go to "))
    env.release()
    client = ScriptedClient([f"<think>look around</think>\n<action>{target}</action>", "no tags at all",
                             "<think>?</think><action>fly to the moon</action>"])
    run = run_format(formatter=AlfWorldFormatter("skillrl"), benchmark=bench, task_ids=tasks[:1], client=client,
                     spec=SPEC, call_budget=4, prompt_ids=qwen_ids)
    rec = run.records[0]
    assert [len(r) for r in client.requests] == [1, 1, 1, 1]  # one user message, rebuilt every step
    p0, p1, p2, p3 = (r[0]["content"] for r in client.requests)
    assert "Retrieved Relevant Experience" not in p0 and first_room in p0  # no skills at step 0
    assert "already taken 1 step(s)" in p1 and f"Action 1: '{target}'" in p1
    assert p1.index("Your task is to: ") < p1.index("### General Principles")
    assert [(s.action, s.valid) for s in rec.steps[:3]] == [("act", True), ("", False), ("act", True)]
    assert "put one admissible action in <action>" in p2.split("your current observation is: ")[1]
    assert "Nothing happens." in p3.split("your current observation is: ")[1]  # the game answered the bad command
    # every request's ids are those of its messages, in order
    assert [r.token_ids for r in run.stream] == [qwen_ids([{"role": "user", "content": p}]) for p in (p0, p1, p2, p3)]
    assert [r.step for r in run.stream] == [0, 1, 2, 3] and {r.category for r in run.stream} == {F.detect_category(env.task)}
    assert all(c.prompt_token_ids for c in rec.llm_calls)


def test_evoskill_formatter_keeps_the_conversation(alfworld):
    bench, tasks = alfworld
    client = ScriptedClient(["<action>look</action>", "<action>inventory</action>"])
    run_format(formatter=AlfWorldFormatter("evoskill"), benchmark=bench, task_ids=tasks[1:2], client=client,
               spec=SPEC, call_budget=3)
    last = client.requests[-1]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user", "user", "assistant", "user"]
    assert last[2]["content"] == "<action>look</action>" and last[3]["content"].startswith("<tool_response>")


def stream_of(prompts: dict[str, list[list[int]]], completion: int = 4) -> list[StreamRequest]:
    out, t = [], 0.0
    for step in range(max(len(v) for v in prompts.values())):
        for ep, ps in prompts.items():
            if step < len(ps):
                t += 1
                out.append(StreamRequest(ep, step, "gen:x:1", "clean", t, ps[step], completion, 0))
    return out


def test_lockstep_groups_run_one_after_another():
    s = stream_of({"a": [[1] * 20, [1] * 30], "b": [[2] * 20], "c": [[3] * 20, [3] * 30, [3] * 40]})
    reqs = study.lockstep_requests(s, 2)
    assert [(r.episode, r.step) for r in reqs] == [("a", 0), ("b", 0), ("a", 1), ("c", 2), ("c", 3), ("c", 4)]
    with pytest.raises(ValueError, match="concurrency"):
        study.lockstep_requests(s, 0)


def test_settings_retain_beats_flush_and_steps_add_up():
    rng = np.random.default_rng(0)
    head = list(rng.integers(0, 1000, 64))
    s = stream_of({e: [head + list(rng.integers(0, 1000, 10 + 5 * k)) for k in range(3)] for e in "abcd"}, completion=40)
    settings = [Setting(p, c, 4) for p in ("retain", "flush") for c in (10_000, 160)]
    rows, steps = study.simulate_settings(s, settings)
    by = {(r.policy, r.capacity_tokens): r for r in rows}
    assert by["retain", 10_000].reuse_ratio > by["flush", 10_000].reuse_ratio
    # flush: only the head blocks written by the step's first request are hit by the other three (4 blocks)
    assert by["flush", 10_000].cached_tokens == 3 * 3 * 64
    assert by["retain", 160].preemptions > 0 and by["retain", 10_000].preemptions == 0
    for r in rows:
        mine = [x for x in steps if (x.policy, x.capacity_tokens) == (r.policy, r.capacity_tokens)]
        assert sum(x.cached_tokens for x in mine) == r.cached_tokens and [x.step for x in mine] == [0, 1, 2]
    with pytest.raises(ValueError, match="kvcache.capacity_tokens 32"):
        study.simulate_settings(s, [Setting("retain", 32, 4)])


def test_simulation_reports_settings_done_of_n_on_the_console(caplog):
    """kvcache_simulate's progress: a line on logger skillrepro.progress per simulated setting, of N."""
    s = stream_of({e: [list(range(40)) + [100 + k] * (8 + k) for k in range(2)] for e in "ab"})
    settings = [Setting("retain", 10_000, 2), Setting("flush", 10_000, 2), Setting("retain", 10_000, 1)]
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        rows, _ = study.simulate_settings(s, settings)
    lines = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER]
    assert len(rows) == 3
    assert any("3 simulated settings (vLLM" in x and "to do" in x for x in lines)
    assert [x.split(": ")[1].split(" simulated")[0] for x in lines if " done, " in x] == ["1/3", "2/3", "3/3"]
    assert "finished, 3/3 simulated settings" in lines[-1]


def test_group_size_repeats_each_game_within_its_lockstep_batch():
    rng = np.random.default_rng(1)
    s = stream_of({e: [list(rng.integers(0, 1000, 50)) for _ in range(3)] for e in "ab"})
    reqs = study.lockstep_requests(s, 4, group_size=2)
    assert [(r.episode, r.step) for r in reqs[:4]] == [("a#0", 0), ("a#1", 0), ("b#0", 0), ("b#1", 0)]
    assert [(r.episode, r.step) for r in study.lockstep_requests(s, 2, group_size=2)][:3] == [("a#0", 0), ("a#1", 0), ("a#0", 1)]
    flush = Setting("flush", 100_000, 64)
    (one,), _ = study.simulate_settings(s, [flush])
    (two,), _ = study.simulate_settings(s, [flush], group_size=2)
    assert one.cached_tokens == 0 and one.requests == 6
    # with the cache flushed every step, a game's second copy reads all but the last block of the first's
    assert two.requests == 12 and two.cached_tokens == 2 * 3 * 48
    with pytest.raises(ValueError, match="kvcache.group_size must be >= 1"):
        study.lockstep_requests(s, 4, group_size=0)
    # ALFWorld-style draw with replacement: a pool of one game gives every slot the first game
    same = study.lockstep_requests(s, 4, draw_pool=1)
    assert [(r.episode, r.step) for r in same[:2]] == [("a#0", 0), ("a#1", 0)] and len(same) == 6
    (drawn,), _ = study.simulate_settings(s, [flush], draw_pool=1)
    (wide,), _ = study.simulate_settings(s, [flush], draw_pool=10**9)
    assert drawn.cached_tokens == 3 * 48 and wide.cached_tokens == 0 and wide.requests == drawn.requests == 6
    with pytest.raises(ValueError, match="set one"):
        study.lockstep_requests(s, 4, group_size=2, draw_pool=3)


def test_break_points_and_ceiling_follow_the_previous_prompt():
    head = list(range(100, 140))  # 40 shared tokens, then the step number differs
    s = stream_of({"a": [head + [1] * 10, head + [2] * 12, head + [3] * 5], "b": [[9] * 30]})
    rows = study.break_points(s, block_size=16, decode=lambda ids: ",".join(map(str, ids)))
    assert [(r.episode, r.step, r.shared_tokens, r.ceiling_tokens) for r in rows] == [("a", 1, 40, 32), ("a", 2, 40, 32)]
    assert rows[0].break_fraction == pytest.approx(40 / 52) and rows[0].break_text == "2,2,2,2"
    same = study.break_points(stream_of({"a": [[5] * 33, [5] * 33]}), block_size=16)
    assert same[0].shared_tokens == 33 and same[0].ceiling_tokens == 32  # the last token is never served


def test_new_locations_count_distinct_go_to_places_per_episode():
    import json as _json

    def step(ep, i, cmd, action="act"):
        return dict(episode_id=ep, step=i, action=action, arguments=_json.dumps([cmd]))
    steps = pd.DataFrame([step("a", 0, "go to desk 1"), step("a", 1, "take pen 1 from desk 1"), step("a", 2, "go to shelf 2"),
                          step("a", 3, "go to desk 1"), step("b", 0, "go to bed 1", action=""), step("b", 1, "look")])
    got = study.new_locations(steps).set_index("episode_id")
    assert got.loc["a", "new_locations"] == 2 and got.loc["a", "go_to_commands"] == 3
    assert got.loc["b", "new_locations"] == 0  # a reply without a parsed action reaches nowhere


def test_step_load_sums_running_episodes():
    s = stream_of({"a": [[1] * 10, [1] * 20], "b": [[2] * 30]}, completion=5)
    assert [(r.step, r.running, r.total_tokens) for r in study.step_load(s)] == [(0, 2, 50), (1, 1, 25)]


def test_server_comparison_single_slot_and_block_cache():
    a0, b0 = list(range(40)), list(range(20)) + [99] * 20
    s = [StreamRequest("a", 0, "t", "clean", 1.0, a0, 2, 0, [7, 8]),
         StreamRequest("a", 1, "t", "clean", 2.0, a0 + [7, 8, 5], 2, 41, [1, 2]),
         StreamRequest("b", 0, "t", "clean", 3.0, b0, 2, 20, [3])]
    rows = study.server_comparison(s, slots=1)
    # llama.cpp keeps the prompt and the reply less its last token: 40 + 1 tokens; vLLM only full blocks
    assert [r.sim_llamacpp_cached_tokens for r in rows] == [0, 41, 20]
    assert [r.sim_vllm_cached_tokens for r in rows] == [0, 32, 16]
    assert [r.server_cached_tokens for r in rows] == [0, 41, 20]


def test_shared_prefix_table_from_real_games(alfworld):
    bench, tasks = alfworld
    views = walk_views(bench, tasks, 2)
    assert all(len(v.history) == 2 and v.task.endswith(".") for v in views)
    # a same-category twin of the first game: its own task sentence, so only the category matches
    twin = F.EpisodeView("twin", views[0].task.replace("put", "puts", 1), views[0].history, views[0].observation,
                         views[0].admissible)
    rows = F.shared_prefix_table(["skillrl", "skillrl_skills_first", "wikiskill_front"], F.load_bank(),
                                 views + [twin], TOK.encode)
    got = {(r.format, r.relation): r for r in rows}
    assert got["skillrl", "same_category"].pairs + got["skillrl", "different_category"].pairs == 6
    assert got["skillrl", "same_category"].shared_tokens_max < 60  # the task sentence ends it
    # skills first: same category shares the whole skill block, different ones part ways at the category skills
    same, other = (got["skillrl_skills_first", r].shared_tokens_max for r in ("same_category", "different_category"))
    text = F.render_chatml(F.build_messages("skillrl_skills_first", F.load_bank(), twin.task, None,
                                            list(twin.history), twin.observation, list(twin.admissible)))
    assert same >= len(TOK.encode(text.split("Your task is to")[0])) - 1 > 2 * other > 400
    assert got["wikiskill_front", "different_category"].shared_tokens_min > 1000
    with pytest.raises(ValueError, match="at least two"):
        F.shared_prefix_table(["skillrl"], F.load_bank(), views[:1], TOK.encode)


def test_kvcache_config_errors_name_the_key(tmp_path):
    base = dict(benchmarks={"babyai": {"env": "babyai"}})
    full = dict(benchmark="alfworld", formats=["skillrl"], n_games=1, split="test", task_seed=1, seeds=[0],
                call_budget=2, max_tokens=None, parallel_episodes=1, bank=None, templates_dir=None, prefix_step=2,
                prefix_tokenizer="qwen2.5", block_size=16, capacity_tokens=[1000], policies=["retain"],
                concurrency=[2], max_num_seqs=8, max_batched_tokens=100, server_slots=1)
    kv = KVConfig.from_config({**base, "kvcache": full})
    assert kv.bench(base).env == "alfworld" and kv.settings() == [Setting("retain", 1000, 2)]
    with pytest.raises(ValueError, match="kvcache.benchmark: 'babyai' has env 'babyai'"):
        KVConfig.from_config({**base, "kvcache": {**full, "benchmark": "babyai"}}).bench(base)
    # vLLM's name for the per-step token budget; the old spelling is an alias of it
    assert KVConfig.from_config({**base, "kvcache": full}).max_num_batched_tokens == 100
    renamed = {k: v for k, v in full.items() if k != "max_batched_tokens"}
    assert KVConfig.from_config({**base, "kvcache": {**renamed, "max_num_batched_tokens": 64}}).max_batched_tokens == 64
    with pytest.raises(ValueError, match="max_batched_tokens \\(100\\) is the old name of max_num_batched_tokens \\(64\\)"):
        KVConfig.from_config({**base, "kvcache": {**full, "max_num_batched_tokens": 64}})
    with pytest.raises(ValueError, match="kvcache: unknown key\\(s\\) capacity"):
        KVConfig.from_config({**base, "kvcache": {**full, "capacity": 3}})
    with pytest.raises(ValueError, match="kvcache.bank: .*nope.json does not exist"):
        KVConfig.from_config({**base, "kvcache": {**full, "bank": str(tmp_path / "nope.json")}})
    # the GPU preset's placeholder stops the study with what to put there; a broken bank stops it at load
    with pytest.raises(ValueError, match="kvcache.bank is still the preset's placeholder .*claude_style_skills.json"):
        KVConfig.from_config({**base, "kvcache": {**full, "bank": "<path to SkillRL's bank>"}})
    (tmp_path / "bad.json").write_text('{"general_skills": [], "task_specific_skills": {}, "common_mistakes": []}')
    with pytest.raises(ValueError, match="bad.json: task_specific_skills lacks categories 'pick_and_place'"):
        KVConfig.from_config({**base, "kvcache": {**full, "bank": str(tmp_path / "bad.json")}})


def test_every_preset_names_its_bank_and_the_gpu_preset_asks_for_skillrls():
    for preset in sorted((ROOT / "configs").glob("kvcache*.yaml")):
        kv = yaml.safe_load(preset.read_text())["kvcache"]
        assert "bank" in kv, preset.name
    gpu = yaml.safe_load((ROOT / "configs/kvcache-gpu.yaml").read_text())["kvcache"]["bank"]
    assert is_placeholder(gpu)


def test_parallel_episodes_share_the_engine_safely(alfworld):
    # textworld's parser is not thread-safe: parallel episodes serialise their env calls
    bench, tasks = alfworld
    client = ScriptedClient(["<action>look</action>", "<action>inventory</action>"])
    run = run_format(formatter=AlfWorldFormatter("skillrl"), benchmark=bench, task_ids=tasks, client=client,
                     spec=SPEC, call_budget=3, parallel=3)
    assert [r.episode.task_id for r in run.records] == tasks
    assert all(r.episode.n_steps == 3 and not r.steps[0].observation.startswith("Invalid") for r in run.records)
    assert len(run.stream) == 9 and len({r.episode for r in run.stream}) == 3


def test_a_lockstep_live_run_sends_each_step_of_a_group_together(alfworld):
    """kvcache.lockstep: groups of `parallel` games one after another, step t of every episode of a group
    before any step t+1: the order the simulator's lockstep concurrency assumes. Free-running, a fast episode
    runs ahead of a slow one."""
    import threading

    bench, tasks = alfworld

    class Slow(ScriptedClient):
        """The episode that asks first gets its first reply only once another episode has sent three requests
        (at most `wait_s`): free-running, the other runs ahead meanwhile; in lockstep it cannot."""

        def __init__(self, replies, wait_s):
            super().__init__(replies)
            self.order: list[str] = []
            self.ahead, self.wait_s = threading.Event(), wait_s

        def chat(self, messages, *, session_id, **kw):
            self.order.append(session_id)
            if sum(s != self.order[0] for s in self.order) >= 3:  # (in lockstep: never within the group)
                self.ahead.set()
            if session_id == self.order[0] and self.order.count(session_id) == 1:
                self.ahead.wait(self.wait_s)
            return super().chat(messages, session_id=session_id, **kw)

    def steps_in_order(lockstep, games, budget):
        # in lockstep the other episode cannot run ahead: the slow one's wait ends after 3 s, in which a
        # free-running episode sends its next requests (each step takes about 1 s here)
        client = Slow(["<action>look</action>"], 3.0 if lockstep else 60.0)
        run = run_format(formatter=AlfWorldFormatter("skillrl"), benchmark=bench, task_ids=games, client=client,
                         spec=SPEC, call_budget=budget, parallel=2, lockstep=lockstep)
        game = {r.episode.episode_id: tasks.index(r.episode.task_id) for r in run.records}
        seen: dict[int, int] = {}
        out = []
        for sid in client.order:  # (game, its step) in the order the server got them
            seen[game[sid]] = seen.get(game[sid], -1) + 1
            out.append((game[sid], seen[game[sid]]))
        return out

    locked = steps_in_order(True, tasks, 3)
    assert [s for g, s in locked if g < 2] == [0, 0, 1, 1, 2, 2]  # the first group's rounds, in step order
    assert [g for g, _ in locked][-3:] == [2, 2, 2]  # the second group after it
    free = steps_in_order(False, tasks[:2], 3)
    assert [s for g, s in free if g < 2] == [0, 0, 1, 2, 1, 2]  # free-running: the fast game runs ahead


def test_schema_lists_every_format():
    props = yaml.safe_load((SCHEMAS / "kvcache.schema.yaml").read_text())["properties"]["kvcache"]["properties"]["formats"]
    assert tuple(props["items"]["enum"]) == tuple(props["default"]) == F.FORMATS


def test_gpu_preset_lists_the_seminars_models_and_refuses_placeholders():
    config = yaml.safe_load((ROOT / "configs/kvcache-gpu.yaml").read_text())
    kv = config["kvcache"]
    assert [m["name"] for m in kv["models"]] == ["base", "skillrl-sft", "skillrl-rl"]
    kv["bank"] = None  # past the bank's own placeholder
    validate({"kvcache": kv}, str(SCHEMAS / "kvcache.schema.yaml"), set_default=True)
    with pytest.raises(ValueError, match=r"kvcache.models\[skillrl-sft\].llm.model is still the preset's "
                                         r"placeholder .*SFT checkpoint.*folder"):
        KVConfig.from_config(config)
    for m, path in zip(kv["models"][1:], ("/ckpt/sft", "/ckpt/rl")):
        m["llm"]["model"] = path
    llms = KVConfig.from_config(config).model_llms(config)
    assert {n: c.model for n, c in llms.items()} == {"base": "Qwen/Qwen2.5-7B-Instruct", "skillrl-sft": "/ckpt/sft",
                                                   "skillrl-rl": "/ckpt/rl"}


def test_games_note_says_official_or_generated():
    official = games_note(["official:valid_unseen/pick_and_place-x/trial_1"] * 2, "test", "/data/alfworld")
    assert official.startswith("KV-cache study plays 2 official ALFWorld games of split test (valid_unseen) "
                               "from /data/alfworld")
    generated = games_note(["gen:pick_and_place:1000"], "test", None, "alfworld")
    assert "1 generated ALFWorld games" in generated and "benchmarks.alfworld.options.data_path (or" in generated


def test_every_kvcache_caption_says_simulator_only_in_replay_mode():
    import types

    import jinja2

    env = jinja2.Environment()
    # the blend experiment's and the engine replays' captions stand apart: neither output exists in replay mode
    # (the engine replays are refused there), and the engine's say what they measured (below)
    captions = sorted(p for p in (ROOT / "report").glob("kvcache_*.rst")
                      if not p.name.startswith(("kvcache_blend", "kvcache_engine")))
    assert len(captions) >= 20
    for path in (ROOT / "report").glob("kvcache_engine*.rst"):
        assert "**Source:** measured on the vLLM engine" in path.read_text(), path.name
    for path in captions:
        for replay, expect in (("planner", True), (None, False)):
            sm = types.SimpleNamespace(config={"llm": {"model": "m", "backend": "vllm"},
                                               "kvcache": {"replay": replay, "formats": ["skillrl"], "seeds": [0],
                                                           "n_games": 2}},
                                       params=types.SimpleNamespace(backend="replay" if replay else "vllm"),
                                       wildcards=types.SimpleNamespace(kvmodel="m"))
            text = env.from_string(path.read_text()).render(snakemake=sm)
            assert ("Simulator only" in text) is expect, path.name
            # every caption names its source; on a served run the seminar's measured outputs name the server
            source = text[text.index("**Source:**"):]
            measured = path.name in {f"kvcache_{n}.rst" for n in (
                "reuse", "reuse_steps", "steps_table", "recomputed", "preemptions", "models", "models_table", "server",
                "server_table", "headline_table")}
            if measured and not replay:
                assert "measured" in source and "vllm server" in source, path.name
            else:
                assert "measured on" not in source and (not replay or "vllm server" not in source), path.name


def test_harness_prompts_equal_the_actors_and_a_planted_difference_is_found(alfworld, tmp_path):
    # the actor's path (runner, formatter hook, the game engine) against the harness's (the run's commands
    # replayed in the engine, prompts built from what it showed): seed 001 2-0's check, on a scripted run
    import dataclasses

    bench, tasks = alfworld
    env = bench.make(tasks[0])
    env.reset()
    target = next(a for a in env.admissible_actions if a.startswith("go to "))
    env.release()
    # a reply without an action in the middle: the actor shows the problem and leaves the game as it was
    replies = [f"<think>go</think><action>{target}</action>", "no tags at all", "<action>look</action>"]
    for fmt in ("skillrl", "evoskill"):  # evoskill quotes earlier replies: the harness takes the run's
        run = run_format(formatter=AlfWorldFormatter(fmt), benchmark=bench, task_ids=tasks[:1],
                         client=ScriptedClient(replies), spec=SPEC, call_budget=3)
        write_records(tmp_path / "episodes.parquet", [r.episode for r in run.records], Episode)
        write_records(tmp_path / "steps.parquet", [s for r in run.records for s in r.steps], Step)
        trs = R.record_trajectories(str(tmp_path), bench, tasks[:1], 3, lambda c: f"<action>{c}</action>")
        calls = [c for r in run.records for c in r.llm_calls]
        of_task = {r.episode.episode_id: r.episode.task_id for r in run.records}
        row = R.prompt_check(calls, of_task, trs, fmt)
        assert (row.prompts, row.compared, row.equal, row.first_difference) == (3, 3, 3, ""), fmt
        planted = dataclasses.replace(calls[2], prompt=calls[2].prompt.replace("Invalid action", "Invalid move", 1))
        bad = R.prompt_check(calls[:2] + [planted], of_task, trs, fmt)
        assert bad.equal == 2 and bad.first_difference.startswith(f"{calls[2].session_id} step 2 char "), fmt


def test_headline_is_the_servers_numbers_with_the_simulators_beside():
    server = pd.DataFrame(dict(format=["a", "a", "b"], seed=[0, 1, 0], prompt_tokens=[100, 100, 50],
                               server_cached_tokens=[60, 40, 10], sim_vllm_cached_tokens=[50, 50, 20],
                               sim_llamacpp_cached_tokens=[0, 0, 0]))
    reuse = pd.DataFrame(dict(format=["a", "a", "b", "b", "a"], policy=["retain", "flush", "retain", "flush", "retain"],
                              capacity_tokens=[1000, 1000, 1000, 1000, 10], concurrency=[4] * 5,
                              reuse_ratio=[0.7, 0.2, 0.3, 0.1, 0.01]))
    # vLLM's /metrics deltas per run: one run of b had none (an older server)
    counters = pd.DataFrame(dict(format=["a", "a", "b"], server_prefix_cache_queries=[200, 200, ""],
                                 server_prefix_cache_hits=[100, 60, ""]))
    h = study.headline(reuse, server, counters, "vllm", ("retain", "flush")).set_index("format")
    assert h.source.str.startswith("measured").all()
    assert h.loc["a", "reuse_ratio"] == h.loc["a", "measured_reuse_ratio"] == 0.5
    assert h.loc["a", "predicted_reuse_ratio"] == 0.5 and h.loc["a", "difference"] == 0
    assert h.loc["b", "difference"] == pytest.approx(0.2 - 0.4)
    assert h.loc["a", "server_prefix_cache_hit_rate"] == 160 / 400 and pd.isna(h.loc["b", "server_prefix_cache_hit_rate"])
    assert (h.loc["a", "simulated_retain_reuse_ratio"], h.loc["a", "simulated_flush_reuse_ratio"]) == (0.7, 0.2)
    # a replay: nothing measured, the headline is the simulator's and says so
    r = study.headline(reuse, server.assign(server_cached_tokens=0), None, "replay", ("retain", "flush"))
    r = r.set_index("format")
    assert r.source.str.startswith("simulated only").all() and r.measured_reuse_ratio.isna().all()
    assert r.reuse_ratio.to_dict() == {"a": 0.7, "b": 0.3} and r.difference.isna().all()


def _synthetic_run_tables(server_cached):
    """One format, two seeds, two steps each: simulation outputs, episodes and the server's counts."""

    sett = dict(policy="retain", capacity_tokens=1000, concurrency=2)
    summary = pd.DataFrame([dict(format="a", seed=s, **sett, requests=4, prompt_tokens=400, cached_tokens=c,
                                 recomputed_tokens=r, preemptions=p)
                            for s, c, r, p in ((0, 100, 350, 1), (1, 200, 200, 0))])
    steps = pd.DataFrame([dict(format="a", seed=s, **sett, step=k, requests=2, prompt_tokens=200, cached_tokens=50 * k)
                          for s in (0, 1) for k in (0, 1)])
    load = pd.DataFrame([dict(format="a", seed=s, step=k, running=2, prompt_tokens=200, completion_tokens=20,
                              total_tokens=220) for s in (0, 1) for k in (0, 1)])
    episodes = pd.DataFrame(dict(variant=["a"] * 4, seed=[0, 0, 1, 1], task_id=["g0", "g1"] * 2,
                                 success=[True, False, True, True], n_steps=2))
    server = pd.DataFrame(dict(format="a", seed=[0, 0, 1, 1], episode=["e0", "e0", "e1", "e1"], step=[0, 1, 0, 1],
                               prompt_tokens=[100, 120, 100, 130], server_cached_tokens=server_cached,
                               sim_llamacpp_cached_tokens=[0, 90, 0, 100], sim_vllm_cached_tokens=[0, 96, 0, 96]))
    return dict(summary=summary, steps=steps, load=load, episodes=episodes, server=server, capacities=(1000,))


def test_success_difference_is_paired_and_its_interval_holds():
    """Each format's success minus the reference format's over the same games and seeds: a planted difference is
    found, formats that differ by chance get intervals covering 0 about 95 % of the time (the null control)."""

    rng = np.random.default_rng(0)

    def episodes(p_ref: float, p_new: float, n: int = 32):
        games = [f"g{i}" for i in range(n)]
        return pd.DataFrame(dict(variant=["skillrl"] * n + ["new"] * n, seed=0, task_id=games * 2,
                                 success=np.r_[rng.random(n) < p_ref, rng.random(n) < p_new]))

    planted = study.success_differences(episodes(0.2, 0.8), "skillrl")
    assert planted.loc["skillrl", "difference_interval"] == "reference format"
    new = planted.loc["new"]
    assert new.paired_episodes == 32 and 0 < new.difference_ci_low < new.success_difference < new.difference_ci_high
    covered = [(lo <= 0 <= hi) for lo, hi in
               (study.success_differences(episodes(0.5, 0.5), "skillrl").loc["new", ["difference_ci_low",
                                                                                    "difference_ci_high"]]
                for _ in range(400))]
    assert 0.92 <= np.mean(covered) <= 0.98
    same = study.success_differences(pd.concat([episodes(0.0, 0.0, 8)]), "skillrl").loc["new"]
    assert same.success_difference == 0 and np.isnan(same.difference_ci_low)
    assert same.difference_interval == "no interval: all 8 pairs differ by the same"


def test_served_tables_put_the_servers_counts_first_and_split_recompute():
    t = study.tables(**_synthetic_run_tables([0, 96, 0, 112]), backend="embedded", policies=("retain",))
    st = t["steps"]
    m = st[st.policy == "server"].set_index("step")
    # per-step reuse from the server's counts (both seeds pooled), beside the simulator's, each labelled
    assert m.loc[1, "reuse_ratio"] == pytest.approx((96 + 112) / 250) and m.loc[0, "reuse_ratio"] == 0
    assert m.loc[1, "simulated_same_requests_reuse_ratio"] == pytest.approx(190 / 250)  # llama.cpp slots
    assert m.loc[1, "measured_minus_simulated"] == pytest.approx((208 - 190) / 250)
    assert m.source.str.startswith("measured: the embedded server").all()
    assert st[st.policy == "retain"].source.str.startswith("simulated: vLLM").all()
    # recomputed = prefix misses at first scheduling + recompute after preemption (the preempted seed's 50)
    r = t["reuse"].iloc[0]
    assert r.prefix_miss_tokens_per_run == 250 and r.preemption_recompute_tokens_per_run == 25
    assert r.prefix_miss_tokens_per_run + r.preemption_recompute_tokens_per_run == r.recomputed_tokens_per_run
    srv = t["server"].set_index("seed")
    assert list(srv.server_prefix_miss_tokens) == [220 - 96, 230 - 112]
    # the models' comparison: measured reuse first, the simulator's for the same requests beside it
    kv = KVConfig.from_config({"kvcache": dict(
        benchmark="alfworld", formats=["a"], n_games=1, split="test", task_seed=1, seeds=[0, 1], call_budget=2,
        max_tokens=None, parallel_episodes=1, bank=None, templates_dir=None, prefix_step=2, prefix_tokenizer="qwen2.5",
        block_size=16, capacity_tokens=[1000], policies=["retain"], concurrency=[2], max_num_seqs=8,
        max_num_batched_tokens=100, server_slots=1)})
    tag = lambda df: df.assign(model="m")  # noqa: E731
    mc = study.model_comparison(tag(t["reuse"]), tag(t["success"]), tag(t["overload"]), kv,
                                headline=tag(t["headline"])).iloc[0]
    assert mc.measured_reuse_ratio == pytest.approx(208 / 450) and mc.source.startswith("measured on the embedded")
    assert mc.measured_minus_simulated == pytest.approx((208 - 190) / 450)


def test_a_served_run_without_the_servers_counts_stops_before_any_table():
    with pytest.raises(CachedTokensUnreported, match=r"vllm server .*--enable-prompt-tokens-details.*2 of 4"):
        study.tables(**_synthetic_run_tables([0, None, 0, None]), backend="vllm", policies=("retain",))
    # a replay has no server: unknown is its honest value, and the server columns stay empty
    t = study.tables(**_synthetic_run_tables([None] * 4), backend="replay", policies=("retain",))
    assert t["server"].server_reuse_ratio.isna().all() and set(t["steps"].policy) == {"retain"}


def test_served_figures_show_the_server_first_and_name_their_source(monkeypatch, tmp_path):
    shown = {}

    def keep(fig, path):  # the figure's title and legend labels, instead of a PNG
        ax = fig.axes[0]
        shown[path] = (ax.get_title(), [t.get_text() for t in ax.get_legend().get_texts()])

    monkeypatch.setattr(figures, "_save", keep)
    kv = KVConfig.from_config({"kvcache": dict(
        benchmark="alfworld", formats=["a"], n_games=1, split="test", task_seed=1, seeds=[0, 1], call_budget=2,
        max_tokens=None, parallel_episodes=1, bank=None, templates_dir=None, prefix_step=2, prefix_tokenizer="qwen2.5",
        block_size=16, capacity_tokens=[1000], policies=["retain"], concurrency=[2], max_num_seqs=8,
        max_num_batched_tokens=100, server_slots=1)})
    for backend in ("embedded", "replay"):
        cached = [0, 96, 0, 112] if backend == "embedded" else [None] * 4
        t = study.tables(**_synthetic_run_tables(cached), backend=backend, policies=("retain",))
        for name in ("reuse_steps", "recomputed", "preemptions", "server"):
            figures.FIGURES[name](t, kv, f"{backend}/{name}")
    for name in ("reuse_steps", "recomputed", "server"):
        title, labels = shown[f"embedded/{name}"]
        assert "measured by the embedded server" in title and labels[0].startswith("a: measured (embedded)"
                                                                                   if name == "reuse_steps" else "measured (embedded)"), name
        title, labels = shown[f"replay/{name}"]
        assert "SIMULATED ONLY" in title and not any("measured" in x for x in labels), name
    assert "after preemption" in " ".join(shown["embedded/recomputed"][1])  # the preempted seed's recompute
    assert "llama.cpp slots never preempt" in shown["embedded/preemptions"][0]


def test_prompt_example_figure_draws_each_formats_segments_in_order(monkeypatch):
    """The seminar's 2-3 prompt example: one bar per format (the first game), its segments in prompt order,
    their widths the segments table's tokens, the skill sections blue."""

    rows = [("skillrl", "g1", ["system", "task", "general", "category", "mistakes", "history_1", "observation"],
             [20, 10, 300, 200, 150, 40, 30]),
            ("evoskill", "g1", ["system", "task", "template", "history_1", "documents"], [20, 10, 5, 40, 600]),
            ("skillrl", "g2", ["system", "task"], [20, 99])]  # another game: not drawn
    table = pd.DataFrame([dict(format=f, episode=e, order=i, segment=s, tokens=t)
                          for f, e, segs, toks in rows for i, (s, t) in enumerate(zip(segs, toks))])
    shown = {}
    monkeypatch.setattr(figures, "_save", lambda fig, path: shown.update(ax=fig.axes[0]))
    figures.segments(table, 2, "qwen2.5", "x.png")
    bars = [(round(p.get_y() + p.get_height() / 2), p.get_x(), p.get_width(), p.get_facecolor())
            for p in shown["ax"].patches]
    for y, total, skills in ((0, 750, 650), (1, 675, 600)):
        mine = sorted((b for b in bars if b[0] == y), key=lambda b: b[1])
        assert sum(b[2] for b in mine) == total and mine[0][1] == 0  # from the prompt's start, every token
        assert all(a[1] + a[2] == b[1] for a, b in zip(mine, mine[1:]))  # in prompt order, end to end
        assert sum(b[2] for b in mine if b[3] == to_rgba("tab:blue")) == skills
    assert "step 2" in shown["ax"].get_title() and "no model or cache" in shown["ax"].get_title()
