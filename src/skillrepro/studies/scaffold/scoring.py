"""l(c; tau) (seed 002, equation 7): the likelihood of a Scout's own actions re-read under a context c (a card in
the actor's system prompt, or none), on the configured scorer."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from skillrepro import skills
from skillrepro.agent import Actor, Prompts, primitive_tools, skill_tools
from skillrepro.benchmarks import call_budget, load_benchmark
from skillrepro.config import ConfigError
from skillrepro.llm import scorer as sc
from skillrepro.llm.models import MODELS, resolve
from skillrepro.llm.scorer import ScoringError, score_conversations
from skillrepro.llm.servers import URL_ENV
from skillrepro.skills.isolation import SandboxPolicy
from skillrepro.studies.scaffold.grpo import exported_checkpoint, load_served
from skillrepro.studies.scaffold.records import ScoreRecord, Trajectory
from skillrepro.studies.scaffold.settings import ScaffoldConfig


def actor_system_prompt(bench: Any, llm: Any, library_dir: str | Path, task_id: str, notes: str) -> str:
    """The system prompt the actor gets for `task_id` with `notes` (a skill card, or "" for none)."""
    benchmark = load_benchmark(bench)
    library = skills.Library.load(library_dir)
    env = benchmark.make(task_id)
    try:
        tools = primitive_tools(env) + skill_tools(library, env, lambda _frame: None, SandboxPolicy())
        actor = Actor(None, benchmark.describe(), call_budget(bench), tool_calling=llm.tool_calling,
                      prompts=Prompts(), notes=notes)  # type: ignore[arg-type]
        return actor.system_prompt(tools)
    finally:
        env.release()


def score_contexts(scorer: Any, scouts: Sequence[Trajectory], contexts: dict[int, str], *, bench: Any, llm: Any,
                   library_dir: str | Path, benchmark: str, variant: str,
                   on_scored: Callable[[int], None] | None = None) -> list[ScoreRecord]:
    """l(c; tau) for every Scout and every context (candidate index -> notes; -1 is no skill); `on_scored(n)` as
    n (Scout, context) pairs are scored (the job's progress).

    The skill-free system prompt is rebuilt and must equal the recorded one: if the actor's prompt changed
    since the Scouts ran, candidate contexts would differ from the Scouts' in more than the skill."""
    prompts: dict[tuple[str, str], str] = {}  # building one makes an env: once per task and context

    def prompt(task_id: str, notes: str) -> str:
        if (task_id, notes) not in prompts:
            prompts[(task_id, notes)] = actor_system_prompt(bench, llm, library_dir, task_id, notes)
        return prompts[(task_id, notes)]

    convs, keys = [], []
    for t in scouts:
        if prompt(t.task_id, "") != t.messages[0]["content"]:
            raise ScoringError(f"episode {t.episode_id}: the recorded system prompt differs from the rebuilt "
                               "skill-free one; rerun the Scouts with the current actor prompt")
        for c, notes in contexts.items():
            convs.append(t.with_system(prompt(t.task_id, notes)))
            keys.append((t, c))
    scores = score_conversations(scorer, convs, on_scored)
    return [ScoreRecord(benchmark, t.task_id, t.episode_id, variant, c, s.n_tokens, s.sum_logprob, s.mean_logprob,
                        s.n_forward_tokens, scorer.name, scorer.model)
            for (t, c), s in zip(keys, scores)]


def scorer_backend(cfg: ScaffoldConfig, llm: Any) -> str:
    if cfg.scorer_backend == "auto":
        return "vllm" if llm.backend == "vllm" else "transformers"
    return cfg.scorer_backend


def load_scorer(cfg: ScaffoldConfig, llm: Any) -> Any:
    """The configured scorer: transformers on the CPU from a GGUF file, or the vLLM server the run uses."""
    backend = scorer_backend(cfg, llm)
    if backend == "transformers":
        model = cfg.scorer_model or llm.model
        if llm.backend == "openai" and not cfg.scorer_model:
            raise ConfigError("config key scaffold.scorer.model: an API model cannot be scored; name a GGUF file "
                              "or a shipped model for the CPU scorer")
        path = resolve(model)
        checkpoint = exported_checkpoint(path)  # a training iteration's policy: read from its own folder
        return sc.TransformersScorer(path, batch_tokens=cfg.scorer_batch_tokens, threads=llm.threads,
                                     model_name=model, weights=load_served(checkpoint) if checkpoint else None)
    if backend == "vllm":
        import os

        model = cfg.scorer_model or llm.model
        served = MODELS[model].hf_id if model in MODELS else model
        url = llm.base_url or os.environ.get(URL_ENV)
        if not url:
            raise ValueError(f"scorer backend vllm: no server URL (llm.base_url or ${URL_ENV})")
        return sc.VLLMScorer(url, served, sc.hf_tokenizer(model), timeout_s=llm.timeout_s)
    raise ConfigError(f"config key scaffold.scorer.backend: {backend!r}; allowed: auto, transformers, vllm")
