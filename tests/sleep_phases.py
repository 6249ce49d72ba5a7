"""What the methods' sleep-phase tests share (tests/methods/: test_methods, test_voyager, test_reasoning_caps):
the benchmarks and library v0 of the recorded BabyAI batch (tests/methods/conftest.py's `run`), its actor
(BabyAI's own bot on the task it solves), and a sleep phase's context over such a run folder and its recorded
calls. A module beside tests/conftest.py, so that those test modules share it without importing each other."""
from __future__ import annotations

from pathlib import Path

from skillrepro.benchmarks.babyai import BabyAIEnv, bot_moves
from skillrepro.config import BenchmarkConfig, LLMConfig, MethodConfig
from skillrepro.methods import InduceContext
from skillrepro.skills import Library
from skillrepro.store import LLMCall, read_records

BABYAI = BenchmarkConfig(name="babyai", env="babyai", llm_call_budget=40)
CRAFTER = BenchmarkConfig(name="crafter", env="crafter", llm_call_budget=3)
V0 = 'def turn_around():\n    """Turn twice."""\n    turn_left()\n    return turn_left()\n'


def gold_actions(task_id: str) -> list[str]:
    """BabyAI's own bot solving the task: the actions of a successful episode."""
    moves = bot_moves(task_id, 60)
    assert moves is not None, task_id
    return moves


def scripted_actor(win_task: str, gold: list[str]):
    """An actor that plays the gold path on `win_task` (success) and turns left elsewhere (failure)."""

    def reply(messages):
        step = sum(1 for m in messages if m["role"] == "assistant")
        if BabyAIEnv(win_task).reset().split("\n")[0] in messages[1]["content"] and step < len(gold):
            return f"Action: {gold[step]}()"
        return "Action: turn_left()"

    return reply


def ctx_for(root: Path, variant: str, method: str, options=None, bench=BABYAI, version=0, tag="") -> InduceContext:
    lib_root = root / "library"
    rec = root / f"induce{tag}" / f"v{version + 1}"
    return InduceContext(library=Library.load(lib_root / f"v{version}"), cycle=version,
                         history_dirs=(root / "train" / f"batch{version}",), library_root=lib_root,
                         out_dir=lib_root / f"v{version + 1}", record_dir=rec, run_id=f"{bench.name}/{variant}/seed0",
                         bench=bench, method=MethodConfig(variant, method, options or {}),
                         llm=LLMConfig(ctx_per_slot=8192), request_budget=5)


def calls_at(folder: Path) -> list[LLMCall]:
    return read_records(folder / "llm_calls.parquet", LLMCall)
