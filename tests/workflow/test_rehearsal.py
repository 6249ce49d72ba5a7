"""`skillrepro rehearse`: the configs it runs (a preset's request shapes at reduced counts), and configs/paper.yaml
rehearsed through the real rules against the provider stand-in (the vLLM preset's rehearsal on the real engine is
in tests/llm/test_vllm_engine.py, the vllm lane)."""
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from snakemake.utils import update_config

from repo import ROOT
from skillrepro.check import check_config
from skillrepro.studies.kvcache.formats import load_bank
from skillrepro.config import ConfigError, load_yaml
from skillrepro.skills import Library
from skillrepro.check import GPUMemoryError
from skillrepro.rehearsal import ENGINE_MODEL, Reduction, preset_memory, reduced
from skillrepro.studies.kvcache.rehearsal import BANK_ENTRIES
from skillrepro.studies.speedrunner.rehearsal import PAPER_SIZES, SCRIPTED


def test_a_rehearsal_config_keeps_the_request_shapes_and_shrinks_the_counts(tmp_path):
    paper = load_yaml(ROOT / "configs/paper.yaml")
    cfg, _ = reduced(paper, Reduction(benchmarks=("babyai", "crafter")), "http://127.0.0.1:1/v1", tmp_path)
    routed = ("base_url", "api_key_env", "response_cache", "max_dollars")
    assert {k: v for k, v in cfg["llm"].items() if k not in routed} == \
        {k: v for k, v in paper["llm"].items() if k not in routed}
    assert cfg["llm"]["base_url"] == "http://127.0.0.1:1/v1"
    assert set(cfg["benchmarks"]) == {"babyai", "crafter"}
    assert cfg["benchmarks"]["crafter"]["llm_call_budget"] == 4 and cfg["benchmarks"]["crafter"]["history_window"] is None
    assert "asi_replay" not in cfg["methods"] and cfg["methods"]["voyager"]["benchmarks"] == ["crafter"]
    assert cfg["methods"]["voyager"]["options"] == paper["methods"]["voyager"]["options"]
    # the methods the stand-in cannot grow start at the paper's size; the others from their own v0
    assert {v: m.get("start_library") for v, m in cfg["methods"].items() if m.get("start_library")} == \
        {v: str(tmp_path / "start_library" / m["method"]) for v, m in cfg["methods"].items()
         if m["method"] in PAPER_SIZES and m["method"] not in SCRIPTED}
    assert cfg["methods"]["voyager"]["start_library"] and not cfg["methods"]["speedrunner"].get("start_library")
    assert cfg["protocol"] | {"task_seed": 42} == {"task_seed": 42, "seeds": [0], "train_rollouts": 2, "sleep_every": 1,
                                                   "eval_every": 2, "n_test": 1}
    assert cfg["analysis"]["truncation"] == paper["analysis"]["truncation"]  # its variant and benchmark stay
    assert all(v["input"] > 0 for v in cfg["pricing"].values())  # placeholders: the zeros would refuse the run


def test_a_vllm_preset_is_rehearsed_on_the_shipped_model_with_its_own_server_flags(tmp_path):
    preset = load_yaml(ROOT / "configs/paper.yaml")
    update_config(preset, load_yaml(ROOT / "configs/paper-vllm.yaml"))
    cfg, _ = reduced(preset, Reduction(benchmarks=("babyai",), variants=("speedrunner", "asi")), None, tmp_path)
    llm = cfg["llm"]
    assert llm["model"] == ENGINE_MODEL and llm["base_url"] is None and llm["slots"] == 2 and llm["max_tokens"] == 64
    # what the engine is asked to accept is the preset's: its server flags, context window, protocol, efforts
    for key in ("vllm_args", "ctx_per_slot", "tool_calling", "reasoning_effort", "backend"):
        assert llm[key] == preset["llm"][key]
    # nothing scripted grows a library on the engine: every learning method starts at the paper's size
    assert set(cfg["methods"]) == {"speedrunner", "asi"}
    assert {v: m["start_library"] for v, m in cfg["methods"].items()} == \
        {v: str(tmp_path / "start_library" / v) for v in ("speedrunner", "asi")}
    assert len(Library.from_folder(cfg["methods"]["asi"]["start_library"]).public()) == PAPER_SIZES["asi"]
    assert cfg["budgets"]["inducer_requests"] == 2
    with pytest.raises(ConfigError, match=r"rehearse --variants: nope not in the preset's methods"):
        reduced(preset, Reduction(variants=("nope",)), None, tmp_path)


@pytest.mark.workflow
def test_the_paper_preset_rehearses_past_the_tool_limit(tmp_path):
    """The smallest rehearsal that still carries a library past OpenAI's 128 tools: SpeedRunner (grown to 160 by
    the stand-in's inducer in its one sleep phase) and ASI (started at its paper size, 160) on BabyAI, every output
    of `all` written. Before the tool limit, such requests were refused (array_above_max_length) and the
    episodes' zeros entered the tables."""
    out = subprocess.run([sys.executable, "-m", "skillrepro.cli", "rehearse", "--configfile", "configs/paper.yaml",
                          "--benchmarks", "babyai", "--variants", "speedrunner", "asi", "--train-rollouts", "1",
                          "--directory", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "refused: 0" in out.stdout and "rehearsal passed" in out.stdout
    ends = next(line for line in out.stdout.splitlines() if line.startswith("terminations: "))
    assert "budget" in ends and "context" not in ends  # no episode ended by a full context
    assert "babyai/speedrunner/seed0 160" in out.stdout and "babyai/asi/seed0 160" in out.stdout
    cfg = yaml.safe_load((tmp_path / "rehearsal.yaml").read_text())
    assert cfg["llm"]["tool_calling"] == "native" and cfg["llm"]["model"] == "gpt-5.4-mini"
    # each 160-function library played through call_skill: every step a valid call of one of its skills, run
    # in the sandbox as a top-level frame
    for variant, version, prefix in (("speedrunner", 1, "rehearsal_skill_"), ("asi", 0, "rehearsal_start_")):
        run = tmp_path / f"results/runs/babyai/{variant}/seed0/eval/v{version}"
        steps = pd.read_parquet(run / "steps.parquet")
        assert len(steps) == 4 and steps.action.str.startswith(prefix).all() and steps.valid.all()
        frames = pd.read_parquet(run / "skill_calls.parquet")
        assert set(frames[frames.parent_frame_id == ""].function) == set(steps.action)
    main = pd.read_csv(tmp_path / "results/tables/main.csv")
    assert (main.skill_calls_per_episode_mean > 0).all()


def test_a_kv_preset_is_rehearsed_at_a_few_games_with_a_bank_of_the_seminars_size(tmp_path):
    preset = load_yaml(ROOT / "configs/kvcache-gpu.yaml")
    cfg, lines = reduced(preset, Reduction(), None, tmp_path)
    kv, llm = cfg["kvcache"], cfg["llm"]
    assert llm["model"] == ENGINE_MODEL and llm["ctx_per_slot"] == preset["llm"]["ctx_per_slot"]
    assert "--gpu-memory-utilization" not in llm["vllm_args"]  # a GPU's share; on a CPU it would be the RAM's
    assert kv["n_games"] == 2 and kv["seeds"] == [0] and kv["call_budget"] == 4 and kv["parallel_episodes"] == 2
    assert [m["name"] for m in kv["models"]] == ["base"] and "llm" not in kv["models"][0]
    # the simulator's settings stay the preset's
    for key in ("capacity_tokens", "policies", "max_num_seqs", "max_num_batched_tokens", "vllm_version", "lockstep"):
        assert kv[key] == preset["kvcache"][key]
    # the placeholder bank became one of SkillRL's size that the study's own loader reads
    bank = load_bank(Path(kv["bank"]))
    assert len(bank.general_skills) + sum(map(len, bank.task_specific_skills.values())) + \
        len(bank.common_mistakes) == BANK_ENTRIES == 55
    assert any("stand-in of 55 entries" in line for line in lines)
    check_config(cfg, check_files=False, billing=False)  # what the rehearsal runs is a valid config


def test_a_scaffold_preset_is_rehearsed_on_one_query_with_its_decoding_and_every_variant(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # where the command runs, which the preset's relative paths are relative to
    preset = load_yaml(ROOT / "configs/scaffold-paper.yaml")
    cfg, lines = reduced(preset, Reduction(), None, tmp_path)
    sc, given = cfg["scaffold"], preset["scaffold"]
    assert cfg["llm"]["model"] == ENGINE_MODEL and cfg["llm"]["ctx_per_slot"] == preset["llm"]["ctx_per_slot"]
    assert (sc["n_queries"], sc["n_scouts"], sc["n_candidates"], sc["n_post"], sc["n_eval"]) == (1, 2, 2, 1, 2)
    # what shapes a request stays the preset's: decoding, evidence budget, scorer, variants and ablations, pools
    for key in ("generator_decoding", "evidence_max_tokens", "scorer", "variants", "ablations", "splits", "threshold"):
        assert sc[key] == given[key]
    assert sc["generator_max_tokens"] == 256 and sc["executor"]["sciworld"] == {"max_tokens": 64, "top_p": 0.85}
    assert cfg["benchmarks"]["alfworld"]["options"]["data_path"] is None  # the official games are not here
    assert {b["llm_call_budget"] for b in cfg["benchmarks"].values()} == {4}
    t = sc["training"]
    assert (t["steps"], t["query_batch_size"], t["cohort_iterations"]) == (1, 1, 1) and "global_batch_size" not in t
    assert t["adapter"] == given["training"]["adapter"] and t["ablations"] == given["training"]["ablations"]
    assert sc["heldout"]["splits"] == {"alfworld": {"test": 1}, "sciworld": {"test_id": 1, "test_ood": 1}}
    # the preset's card files, relative to the repository, are read from the rehearsal's own directory too
    assert sc["heldout"]["skills"]["alfworld"] == str(ROOT / "configs/skills/alfworld.txt")
    check_config(cfg, check_files=False, billing=False)
    only, _ = reduced(preset, Reduction(benchmarks=("sciworld",)), None, tmp_path)
    assert only["scaffold"]["benchmarks"] == ["sciworld"] and list(only["scaffold"]["heldout"]["splits"]) == ["sciworld"]
    assert list(only["scaffold"]["executor"]) == list(only["scaffold"]["splits"]) == ["sciworld"]
    check_config(reduced(preset, Reduction(benchmarks=("alfworld",)), None, tmp_path)[0], check_files=False, billing=False)
    # the preset's GPU jobs at its own sizes, printed; one that cannot fit refuses the rehearsal before any job
    memory = preset_memory(preset)
    assert len(memory) == 2 and "GRPO update" in memory[1] and "LoRA adapter" in memory[1] and "80 GiB" in memory[1]
    with pytest.raises(GPUMemoryError, match="GRPO update.*against 40 GiB"):
        preset_memory({**preset, "cluster": {"gpu_memory_gib": 40}})
