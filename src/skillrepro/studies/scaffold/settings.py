"""The `scaffold:` config section (checked by src/skillrepro/schemas/scaffold.schema.yaml) as typed settings: the
study's sizes, the card format, the ablations, the GRPO training chains and table 5's training keys, the held-out
evaluation; a job's settings and fingerprint; the study's contract object (`SCAFFOLD`). Every value the workflow
cannot honour is refused here, before any work, with a ConfigError naming its key.

Long because every key of the section is checked here, in one place, before any work, and a job's fingerprint
reads the same typed section.
"""
from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass, field, replace
from pathlib import Path
from typing import Any

from skillrepro.config import (BenchmarkConfig, ConfigError, LLMConfig, benchmark, file_digest, fingerprint,
                               llm_config, validate_section)
from skillrepro.studies.contract import Study, settings_fingerprint
from skillrepro.studies.scaffold.cards import (CardFormat, GeneratorRequest, GeneratorTemplate, generator_request,
                                               paper_card, paper_reply, section_word_bounds)
from skillrepro.studies.scaffold.paths import LAYOUT, Instance
from skillrepro.studies.scaffold.selection import VARIANTS
from skillrepro.studies.scaffold.statistics import INTERVALS


@dataclass(frozen=True)
class Ablation:
    """A selection ablation of table 3 on top of utility variant `of`."""

    of: str = "grp"
    selection: str = "utility"  # utility | random | shuffled (see select_with)
    gate: bool = True  # False: inject the best card even when its utility is not positive
    # Trained as a chain (scaffold.training.ablations): table 3's "no Generator loss + random selection"
    generator_learning: bool = True


@dataclass(frozen=True)
class AdapterSettings:
    """A LoRA adapter for the GRPO update (config `scaffold.training.adapter`; unset: full fine-tuning, the paper)."""

    rank: int
    alpha: float
    dropout: float
    target_modules: tuple[str, ...]

    @classmethod
    def from_config(cls, adapter: dict[str, Any]) -> "AdapterSettings":
        return cls(int(adapter["rank"]), float(adapter["alpha"]), float(adapter["dropout"]),
                   tuple(adapter["target_modules"]))


@dataclass(frozen=True)
class TrainSettings:
    """Table 5's settings that one update reads (config `scaffold.training`; `check_training` refuses the
    values it cannot honour)."""

    learning_rate: float = 1e-6
    adam_betas: tuple[float, float] = (0.9, 0.98)
    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.0
    lambda_gen: float = 0.1
    generator_entropy_coef: float = 0.002
    executor_entropy_coef: float = 0.0
    generator_learning: bool = True
    queries_per_step: int = 1  # TRL groups (queries) per optimizer step
    micro_batch_size: int | None = None  # sequences per forward/backward (gradient accumulation); None: a step's all
    max_sequence_tokens: int | None = None  # longest sample (prompt + completion) an update accepts
    adapter: AdapterSettings | None = None  # None: the whole policy trains (the paper)

    @classmethod
    def from_config(cls, training: dict[str, Any]) -> "TrainSettings":
        keys = {f for f in cls.__dataclass_fields__}
        t = {k: v for k, v in training.items() if k in keys}
        if "adam_betas" in t:
            t["adam_betas"] = tuple(t["adam_betas"])
        if t.get("adapter") is not None:
            t["adapter"] = AdapterSettings.from_config(t["adapter"])
        if "query_batch_size" in training:
            t["queries_per_step"] = int(training["query_batch_size"])
        return cls(**t)

    def accumulation(self, group_size: int) -> tuple[int, int]:
        """(sequences per micro-batch, micro-batches per optimizer step) for groups of `group_size`."""
        per_step = group_size * self.queries_per_step
        micro = self.micro_batch_size or per_step
        if per_step % micro:
            raise ConfigError(f"config key scaffold.training.micro_batch_size: {micro} does not divide the "
                              f"{per_step} sequences of an optimizer step (query_batch_size x (N + L + M))")
        return micro, per_step // micro


# Keys of `scaffold.training` the workflow reads (the rules: model, steps, query_batch_size, inject,
# cohort_iterations, keep_optimizer_states; an update: TrainSettings) or checks (`check_training`).
TRAINING_KEYS = ("model", "steps", "optimizer", "learning_rate", "adam_betas", "query_batch_size",
                 "global_batch_size", "clip_low", "clip_high", "kl_coef", "executor_entropy_coef",
                 "max_sequence_tokens", "micro_batch_size", "lambda_gen", "generator_entropy_coef",
                 "generator_learning", "inject", "cohort_iterations", "keep_optimizer_states", "baseline",
                 "ablations", "adapter")


def check_training(training: dict[str, Any], n_scouts: int, n_post: int, n_candidates: int) -> None:
    """Refuse, before any work starts, every `scaffold.training` value the update cannot honour, naming its key.

    optimizer: only adam (the update's AdamW with weight decay 0 is Adam; no weight decay is configurable).
    global_batch_size: the Executor trajectories of one optimizer step, query_batch_size x (N + L) (table 5's
    128 = 16 x (4 + 4)); the update takes one step per iteration, so any other value is refused.
    cohort_iterations: at most steps. micro_batch_size must divide a step's query_batch_size x (N + L + M)."""
    t = dict(training or {})
    unknown = sorted(set(t) - set(TRAINING_KEYS))
    if unknown:
        raise ConfigError(f"config key scaffold.training.{unknown[0]}: not a training setting this workflow reads")
    if t.get("optimizer", "adam") != "adam":
        raise ConfigError(f"config key scaffold.training.optimizer: {t['optimizer']!r} is not implemented; the update "
                          "uses Adam (torch AdamW with weight decay 0, table 5)")
    qbs = int(t.get("query_batch_size", 1))
    if "global_batch_size" in t and int(t["global_batch_size"]) != qbs * (n_scouts + n_post):
        raise ConfigError(f"config key scaffold.training.global_batch_size: {t['global_batch_size']} is not "
                          f"implemented; an update takes one optimizer step over an iteration's query_batch_size x "
                          f"(N + L) = {qbs} x {n_scouts + n_post} = {qbs * (n_scouts + n_post)} Executor trajectories")
    given = t.get("steps", 1)
    steps = min(given.values()) if isinstance(given, dict) else int(given)
    if int(t.get("cohort_iterations", 1)) > steps:
        raise ConfigError(f"config key scaffold.training.cohort_iterations: {t['cohort_iterations']} exceeds steps "
                          f"({steps}); the later checkpoints must come after every cohort iteration")
    TrainSettings.from_config(t).accumulation(n_scouts + n_post + n_candidates)


@dataclass(frozen=True)
class HeldoutConfig:
    """Held-out evaluation (appendix A.1): every policy played skill-free on each benchmark's held-out pools.

    `splits`: benchmark -> held-out split -> number of tasks (None: the whole pool, as the paper evaluates);
    a benchmark not listed is evaluated on its own `test` split. A split is `test` (the benchmark's sampler:
    ALFWorld's valid_unseen with the official data) or a pool named in `scaffold.splits` (ScienceWorld's
    test_id / test_ood). `rollouts`: skill-free rollouts per task and policy (table 6's Pass@k needs k).
    `every`: the checkpoints evaluated, 0, every, 2 x every, ... and always the last."""

    splits: dict[str, dict[str, int | None]] = field(default_factory=dict)
    rollouts: int = 1
    every: int = 1
    # benchmark -> card file: the direct-skill-prompting baseline, the base model played with that card (held-out
    # policy folder paths.DIRECT_POLICY)
    skills: dict[str, str] = field(default_factory=dict)

    def of(self, benchmark: str) -> dict[str, int | None]:
        return self.splits.get(benchmark) or {"test": None}

    def checkpoints(self, steps: int) -> list[int]:
        return sorted({k for k in range(0, steps + 1, self.every)} | {steps})


# The plain-GRPO training chain (table 1's GRPO row, the in-house baseline): the same query batches, Scouts and
# Post-Scouts as a SkillScaffold chain, with no Generator and no injection, so the Executor group is N + L
# skill-free trajectories.
BASELINE = "grpo"


@dataclass(frozen=True)
class Chain:
    """A GRPO training chain: `of` the utility variant whose cards it generates and scores (None: plain GRPO, no
    skill pathway at all); `generator_learning` / `inject` as in table 3's training ablations."""

    name: str
    of: str | None
    generator_learning: bool = True
    inject: bool = True
    selection: str = "utility"  # a trained selection ablation (Ablation)
    gate: bool = True

    @property
    def skillrl_style(self) -> bool:
        """The SkillRL-style baseline of figures 1, 7 and 8 (always-on injection): every query's Post-Scouts get a
        card, drawn without regard to utility, from a Generator that no utility trains (the trained ablation
        {selection: random, gate: false, generator_learning: false}). SkillRL's own cards come from a stronger
        teacher's SkillBank, and it is evaluated with skills; here the shared policy writes them and every policy
        is evaluated skill-free (docs/deviations.md)."""
        return bool(self.of) and not self.gate and self.selection == "random" and not self.generator_learning

    @property
    def method(self) -> str:
        """The row label of the held-out tables."""
        if self.of is None:
            return "GRPO"
        if self.skillrl_style:
            return f"SkillRL-style always-on injection ({self.of} cards)"
        label = f"SkillScaffold ({self.of})"
        if self.selection != "utility":
            label += f" {self.selection} selection"
        if not self.gate:
            label += " w/o gate"
        if not self.generator_learning:
            label += " w/o Generator learning"
        if not self.inject:
            label += " w/o injection"
        return label


@dataclass(frozen=True)
class ScaffoldConfig:
    benchmarks: tuple[str, ...]  # benchmark instance names from `benchmarks:`
    variants: tuple[str, ...] = ("grp",)
    n_queries: int = 2
    task_seed: int = 42  # the query sample's and the held-out task lists' (iteration k of a chain: + 1 + k)
    split: str = "train"
    n_scouts: int = 4  # N
    n_candidates: int = 4  # M
    n_post: int = 4  # L
    n_eval: int = 2  # downstream evaluation rollouts per condition (validation only)
    n_probes: int = 4  # figure 3(b): skill-free probe rollouts per query, separate from the n_eval baseline
    # figure 2: rollout budgets K of the pilot, each K <= n_eval; None: every power of two that fits
    pilot_ks: tuple[int, ...] | None = None
    bootstrap_interval: str = "expanded"  # expanded | percentile (bootstrap_interval)
    threshold: float = 0.0
    evidence_max_chars: int = 6000
    evidence_max_tokens: int | None = None  # the budget in the Generator's tokens instead (evidence_max_chars unused)
    generator_max_tokens: int = 600
    generator_decoding: str = "auto"  # auto | grammar | grammar_single | json_schema | prompt | none (generator_request)
    generator_prompts: dict[str, str] = field(default_factory=dict)  # benchmark env -> template file
    # benchmark env -> the Generator's reply form (REPLY_FORMS), for every env of `benchmarks`: the config's
    # `scaffold.generator_reply`, else the paper's (cards.PAPER_REPLY)
    generator_reply: dict[str, str] = field(default_factory=dict)
    # benchmark env -> its card format (reply form aside: `generator_reply`), for every configured env: the paper's
    # (cards.PAPER_CARDS), with `scaffold.card`'s keys for every env and then its `scaffold.card.<env>` keys. A
    # generate job's fingerprint reads all of it (SCAFFOLD: "scaffold.card"): one env's change reruns all.
    card: dict[str, CardFormat] = field(default_factory=dict)
    scorer_backend: str = "auto"  # auto | transformers | vllm
    scorer_model: str | None = None  # GGUF path or shipped name (transformers); served model id (vllm)
    scorer_batch_tokens: int = 8192
    # Selection ablations (table 3): name -> Ablation; each reuses its base variant's cards and utilities.
    ablations: dict[str, "Ablation"] = field(default_factory=dict)
    # ScienceWorld query pools per benchmark and split (appendix A.1): split -> ["task@partition", ...].
    splits: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    executor: dict[str, dict[str, Any]] = field(default_factory=dict)  # benchmark -> {max_tokens, temperature}
    training: dict[str, Any] = field(default_factory=dict)  # table 5's RL settings, read by the GRPO stage
    webshop_data: str | None = None  # WebShop's data folder: the category split of appendix A.1
    heldout: HeldoutConfig = HeldoutConfig()  # the held-out evaluation of every policy (tables 1-3, 6)

    @property
    def figure2_ks(self) -> tuple[int, ...]:
        """Figure 2's K values: `pilot_ks`, else every power of two up to n_eval, the rollouts of each condition.
        Figure 2(b) (groups not tied) needs K rollouts, so it has a point at each; figure 2(a) (sign disagreement
        of two disjoint halves) needs 2K, so it has a point where 2K <= n_eval (pilot_rollout_estimates)."""
        if self.pilot_ks is not None:
            return self.pilot_ks
        return tuple(2 ** i for i in range(self.n_eval.bit_length()))

    @property
    def selection_variants(self) -> tuple[str, ...]:
        """Every variant the validation experiment selects and runs Post-Scouts for: the utility variants, then the
        ablations (but those without Generator learning, which differ only in training)."""
        return self.variants + tuple(n for n, a in self.ablations.items() if a.generator_learning)

    def ablation(self, variant: str) -> "Ablation":
        return self.ablations.get(variant) or Ablation(of=variant)

    @property
    def chains(self) -> tuple[Chain, ...]:
        """The GRPO training chains: one per utility variant (with table 3's training switches), then plain GRPO
        unless `training.baseline` is false."""
        t = self.training
        learn, inject = bool(t.get("generator_learning", True)), bool(t.get("inject", True))
        out = tuple(Chain(v, v, learn, inject) for v in self.variants)
        # table 3's selection ablations trained (`training.ablations`), each on its utility variant's cards
        out += tuple(Chain(n, a.of, learn and a.generator_learning, inject, a.selection, a.gate)
                     for n, a in ((n, self.ablations[n]) for n in t.get("ablations", ())))
        return out + ((Chain(BASELINE, None, False, False),) if t.get("baseline", True) else ())

    def chain(self, name: str) -> Chain:
        return next(c for c in self.chains if c.name == name)

    def steps(self, benchmark: str) -> int:
        """GRPO updates of every chain on `benchmark` (`training.steps`: one number, or one per benchmark as in
        table 5: ALFWorld 100, ScienceWorld 160)."""
        steps = self.training.get("steps", 1)
        return int(steps[benchmark] if isinstance(steps, dict) else steps)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "ScaffoldConfig":
        """The `scaffold:` section of `config`, checked against src/skillrepro/schemas/scaffold.schema.yaml and then against the
        rest of the config; every problem is a ConfigError naming its key, raised before any work."""
        s = validate_section(config, "scaffold")
        card = s.pop("card", {}) or {}
        scorer = s.pop("scorer", {}) or {}
        names = s.pop("benchmarks", None) or list(config.get("benchmarks", {}))
        unknown = [b for b in names if b not in config.get("benchmarks", {})]
        if unknown:
            raise ConfigError(f"config key scaffold.benchmarks: {', '.join(unknown)} not in benchmarks "
                              f"({', '.join(config.get('benchmarks', {}))})")
        bad = [v for v in s.get("variants", ["grp"]) if v not in VARIANTS]
        if bad:
            raise ConfigError(f"config key scaffold.variants: {bad} not allowed; allowed: {', '.join(VARIANTS)}")
        ablations = {name: Ablation(**a) for name, a in (s.pop("ablations", {}) or {}).items()}
        for name, a in ablations.items():
            if name in VARIANTS or a.of not in s.get("variants", ["grp"]):
                raise ConfigError(f"config key scaffold.ablations.{name}: the name must differ from grp/anc and "
                                  f"'of' ({a.of}) must be one of scaffold.variants")
        if s.get("pilot_ks") is not None:
            n_eval = s.get("n_eval", 2)
            over = [k for k in s["pilot_ks"] if k > n_eval]
            if over:
                raise ConfigError(f"config key scaffold.pilot_ks: K = {', '.join(map(str, over))} needs K rollouts per "
                                  f"condition, but scaffold.n_eval is {n_eval}: raise n_eval to {max(over)} (figure "
                                  f"2(a) at K needs 2K) or drop those K")
            s["pilot_ks"] = tuple(s["pilot_ks"])
        heldout = s.pop("heldout", {}) or {}
        s["heldout"] = HeldoutConfig({b: dict(d) for b, d in (heldout.get("splits") or {}).items()},
                                     int(heldout.get("rollouts", 1)), int(heldout.get("every", 1)),
                                     {b: str(f) for b, f in (heldout.get("skills") or {}).items()})
        for name in (s.get("training") or {}).get("ablations", ()):
            if name not in ablations:
                raise ConfigError(f"config key scaffold.training.ablations: {name!r} is not in scaffold.ablations")
            if name[-1].isdigit() or name == BASELINE:  # an instance is <benchmark>@<chain><iteration>
                raise ConfigError(f"config key scaffold.training.ablations: a trained ablation's name may not end in a "
                                  f"digit or be {BASELINE!r} ({name!r})")
        splits = {b: {k: tuple(v) for k, v in d.items()} for b, d in (s.pop("splits", {}) or {}).items()}
        steps = (s.get("training") or {}).get("steps")
        if isinstance(steps, dict) and set(steps) != set(names):
            raise ConfigError(f"config key scaffold.training.steps: per benchmark, it must name each of "
                              f"scaffold.benchmarks ({', '.join(names)}); it names {', '.join(steps) or 'none'}")
        for b in list(splits) + list(s.get("executor", {}) or {}):
            if b not in names:
                raise ConfigError(f"config key scaffold.splits/executor: {b!r} is not one of scaffold.benchmarks")
        s["splits"] = splits
        envs = {b: (config["benchmarks"][b] or {}).get("env", b) for b in names}
        configured = {(v or {}).get("env", k) for k, v in config["benchmarks"].items()}
        reply = dict(s.pop("generator_reply", {}) or {})
        for key, per_env in (("generator_reply", reply), ("generator_prompts", s.get("generator_prompts") or {})):
            for env in per_env:
                if env not in configured:
                    raise ConfigError(f"config key scaffold.{key}.{env}: not the env of any benchmark in "
                                      f"benchmarks ({', '.join(sorted(set(envs.values())))} in scaffold.benchmarks)")
        cards = card_formats(card, configured)
        out = cls(benchmarks=tuple(names), variants=tuple(s.pop("variants", ("grp",))), card=cards,
                  scorer_backend=scorer.get("backend", "auto"), scorer_model=scorer.get("model"),
                  scorer_batch_tokens=scorer.get("batch_tokens", 8192),
                  generator_prompts=dict(s.pop("generator_prompts", {}) or {}), ablations=ablations,
                  generator_reply={env: reply.get(env, paper_reply(env)) for env in sorted(set(envs.values()))}, **s)
        for env in out.generator_reply:  # fails early if a benchmark's card or reply cannot be decoded as configured
            try:
                section_word_bounds(out.card_format(env), out.generator_max_tokens)
            except ValueError as e:
                key = f"scaffold.card.{env}" if env in card else "scaffold.card"
                raise ConfigError(f"config key {key} (the card on {env}): {e}") from None
            out.generator_request((config.get("llm") or {}).get("backend", "embedded"), env)
            try:  # the env's Generator template: the packaged one, or the user's file
                GeneratorTemplate.load(env, out.generator_prompts.get(env))
            except (OSError, ValueError) as e:
                raise ConfigError(f"config key scaffold.generator_prompts.{env}: {e}") from None
        if out.bootstrap_interval not in INTERVALS:
            raise ConfigError(f"config key scaffold.bootstrap_interval: {out.bootstrap_interval!r}; allowed: "
                              f"{', '.join(INTERVALS)}")
        check_training(out.training, out.n_scouts, out.n_post, out.n_candidates)
        check_heldout(out, config)
        if out.evidence_max_tokens and (config.get("llm") or {}).get("backend") == "openai":
            raise ConfigError("config key scaffold.evidence_max_tokens: no tokenizer for llm.backend openai; "
                              "use scaffold.evidence_max_chars")
        return out

    def card_format(self, env: str) -> CardFormat:
        """The card format on a benchmark env (`card`, else the paper's), with the env's reply form."""
        return replace(self.card.get(env) or paper_card(env), reply=self.generator_reply.get(env, paper_reply(env)))

    def generator_request(self, backend: str, env: str) -> "GeneratorRequest":
        return generator_request(self.card_format(env), self.generator_decoding, backend, self.generator_max_tokens,
                                 f"scaffold.generator_reply.{env}")


CARD_KEYS = ("headings", "max_words", "min_words", "name")


def card_formats(card: dict[str, Any], envs: set[str]) -> dict[str, CardFormat]:
    """Each env's card format from `scaffold.card` (schema-checked): the paper's, then the keys given for every env,
    then those under the env's own key. A key that is neither a format key nor a configured env is refused."""
    every = {k: card[k] for k in CARD_KEYS if k in card}
    for env in card:
        if env not in CARD_KEYS and env not in envs:
            raise ConfigError(f"config key scaffold.card.{env}: neither a card key ({', '.join(CARD_KEYS)}) nor the env "
                              f"of a benchmark in benchmarks ({', '.join(sorted(envs))})")

    def fmt(env: str) -> CardFormat:
        keys = {**every, **(card.get(env) or {})}
        if "headings" in keys:
            keys["headings"] = tuple(keys["headings"])
        return replace(paper_card(env), **keys)

    return {env: fmt(env) for env in sorted(envs)}


def check_heldout(cfg: ScaffoldConfig, config: dict[str, Any]) -> None:
    """Refuse, before any work starts, a held-out split that is not held out: the training split itself, an
    unknown split, or a ScienceWorld pool sharing a task@partition with the training pool."""
    h = cfg.heldout
    if h.rollouts < 1 or h.every < 1:
        raise ConfigError("config key scaffold.heldout.rollouts/every: must be at least 1")
    for b, path in h.skills.items():
        if b not in cfg.benchmarks:
            raise ConfigError(f"config key scaffold.heldout.skills.{b}: not one of scaffold.benchmarks")
        if not Path(path).is_file():
            raise ConfigError(f"config key scaffold.heldout.skills.{b}: no card file {path!r}")
    for b, splits in h.splits.items():
        if b not in cfg.benchmarks:
            raise ConfigError(f"config key scaffold.heldout.splits.{b}: not one of scaffold.benchmarks")
        if not splits:
            raise ConfigError(f"config key scaffold.heldout.splits.{b}: no split")
    for b in cfg.benchmarks:
        train = set(cfg.splits.get(b, {}).get(cfg.split, ()))
        for split, n in h.of(b).items():
            key = f"scaffold.heldout.splits.{b}.{split}"
            if split == cfg.split or split == "train":
                raise ConfigError(f"config key {key}: the training split is not held out")
            if split != "test" and split not in cfg.splits.get(b, {}):
                raise ConfigError(f"config key {key}: neither test nor a split in scaffold.splits.{b}")
            shared = train & set(cfg.splits.get(b, {}).get(split, ()))
            if shared:
                raise ConfigError(f"config key {key}: {sorted(shared)} is also in the training pool "
                                  f"scaffold.splits.{b}.{cfg.split}")
            if n is not None and int(n) < 1:
                raise ConfigError(f"config key {key}: {n} tasks")


def instance_policy(name: str) -> str:
    """The policy that plays a scaffold instance: checkpoint k of its chain for iteration k > 0 of a training
    chain, "" (llm.model on the run's shared server) for the validation experiment and every iteration 0."""
    played = Instance.named(name).checkpoint
    return played.folder if played else ""


def training_iteration(cfg: ScaffoldConfig, chain: str | None, k: int) -> ScaffoldConfig:
    """The settings of iteration k of a GRPO chain: a batch of `training.query_batch_size` queries, scored by
    its own checkpoint (a configured scorer model is llm.model's, so it serves iteration 0 only)."""
    if chain is None:
        return cfg
    return replace(cfg, n_queries=int(cfg.training.get("query_batch_size", cfg.n_queries)),
                   scorer_model=cfg.scorer_model if k == 0 else None)


def executor_llm(llm: Any, cfg: ScaffoldConfig, benchmark: str) -> Any:
    """The actor's LLM settings on `benchmark` (table 5 has tokens per turn per benchmark)."""
    return replace(llm, **cfg.executor.get(benchmark, {}))


# A checkpoint's weights as llama.cpp serves them (CPU scale). In a folder of its own: transformers, given a
# GGUF file in a folder that also holds tokenizer files, loads a tokenizer without the chat template.
CHECKPOINT_GGUF = "gguf/model.gguf"


def serving_model(checkpoint: str | Path, backend: str) -> str:
    """What a server loads to play a checkpoint's policy: its GGUF (llama.cpp) or its folder (vLLM)."""
    return str(Path(checkpoint) / CHECKPOINT_GGUF) if backend == "embedded" else str(checkpoint)


def policy_llm(llm: LLMConfig, checkpoint: str) -> LLMConfig:
    """`llm` played by `checkpoint` on a server of the job's own ("": unchanged, the run's shared server)."""
    return replace(llm, model=serving_model(checkpoint, llm.backend), base_url=None) if checkpoint else llm


# ---------------------------------------------------------------------------------- the study's contract
@dataclass(frozen=True)
class ScaffoldJob:
    """The typed settings of one SkillScaffold job (rules/scaffold/)."""

    scaffold: ScaffoldConfig  # a training iteration's own for an instance <benchmark>@<chain><k>
    bench: BenchmarkConfig
    llm: LLMConfig  # the Executor's on this benchmark (scaffold.executor), served from `policy`
    generator_llm: LLMConfig  # the Generator's (the llm section's), served from `policy`
    policy: str  # the GRPO checkpoint that plays ("": llm.model on the invocation's shared server)


def scaffold_job(config: dict[str, Any], scaffold: ScaffoldConfig, kind: str, keyed: dict[str, Any],
                 params: Any) -> ScaffoldJob:
    """A SkillScaffold job's typed settings (SCAFFOLD.job, at skillrepro.pipeline.start_job): its instance's
    training iteration, and the Executor and Generator played by the checkpoint its rule's `policy` param names."""
    inst = Instance.named(keyed["sbench"])
    bench, llm, policy = inst.bench, llm_config(config), getattr(params, "policy", "")
    return ScaffoldJob(training_iteration(scaffold, inst.chain, inst.iteration), benchmark(config, bench),
                       policy_llm(executor_llm(llm, scaffold, bench), policy), policy_llm(llm, policy), policy)


# The config's scaffold.scorer sub-section is three fields of ScaffoldConfig (and of the fingerprints made so far).
SCORER_FIELDS = {"scorer.backend": "scorer_backend", "scorer.model": "scorer_model",
                 "scorer.batch_tokens": "scorer_batch_tokens"}


def scaffold_fingerprint(config: dict[str, Any], scaffold: ScaffoldConfig, reads: str, *, sbench: str) -> str:
    """A SkillScaffold job's, of kind `reads` (SCAFFOLD's kinds) on instance `sbench` (<benchmark>[@<chain><k>]):
    the llm section, the benchmark and its call budget, and what the kind reads of the scaffold section (the
    Generator templates' contents too, which a user may edit in place): the typed section whole, but the keys it
    leaves out ("!scaffold.<key>", at their defaults), where it reads "scaffold"."""
    bench = Instance.named(sbench).bench
    base = settings_fingerprint(config, ("llm", "benchmark", "call_budget"), bench=bench)
    keys = SCAFFOLD.kind(reads)
    if "scaffold" in keys:
        fields = {f.name: f for f in dataclasses.fields(scaffold)}
        left_out = [fields[k.removeprefix("!scaffold.")] for k in keys if k.startswith("!")]
        chosen: Any = replace(scaffold, **{f.name: f.default if f.default is not MISSING else f.default_factory()
                                           for f in left_out})
    else:
        chosen = {}
        for key in (k.removeprefix("scaffold.") for k in keys):
            key = SCORER_FIELDS.get(key, key)
            name, _, sub = key.partition(".")
            value = getattr(scaffold, name)
            if name in ("splits", "executor"):
                value = value.get(bench, {})
            elif name == "generator_reply":  # the benchmark's own reply form, written out or the paper's
                value = scaffold.card_format(config["benchmarks"][bench]["env"]).reply
            elif name == "card":  # the benchmark env's own format: another env's card is no change here
                value = scaffold.card_format(config["benchmarks"][bench]["env"])
            elif name == "heldout":
                value = [value.of(bench), value.rollouts]  # `every` only says which checkpoints there are
            chosen[key] = value.get(sub) if sub else value
    prompts = {env: file_digest(f) for env, f in scaffold.generator_prompts.items()}
    return fingerprint([base, chosen] + ([prompts] if prompts and reads in ("generate", "update") else []))


SCAFFOLD = Study(
    name="scaffold",
    sections=("scaffold",),
    schema="scaffold.schema.yaml",
    builder=ScaffoldConfig.from_config,
    # keys of the scaffold section (scaffold_fingerprint); every kind also reads the llm section and its benchmark
    # with its call budget. A job's inputs carry the rest: a Post-Scout reruns when its selection does.
    reads={
        "play": ("scaffold.split", "scaffold.splits", "scaffold.n_queries", "scaffold.task_seed", "scaffold.executor",
                 "scaffold.training.query_batch_size"),  # queries and every rollout
        "evidence": ("scaffold.evidence_max_chars", "scaffold.evidence_max_tokens"),
        "generate": ("scaffold.card", "scaffold.generator_decoding", "scaffold.generator_max_tokens",
                     "scaffold.n_candidates", "scaffold.generator_prompts", "scaffold.generator_reply"),
        "score": ("scaffold.scorer.backend", "scaffold.scorer.model", "scaffold.scorer.batch_tokens"),
        "select": ("scaffold.ablations",),
        "heldout": ("scaffold.heldout", "scaffold.split", "scaffold.splits", "scaffold.task_seed", "scaffold.executor"),
        "update": ("scaffold", "!scaffold.heldout"),  # a GRPO update: the whole section but the held-out evaluation
    },
    keyed_by=("sbench",),
    aliases={"sbench": "hbench"},  # the held-out rules' instance
    fingerprint=scaffold_fingerprint,
    job=scaffold_job,
    wildcards=("sbench", "svariant", "i", "k", "hbench", "hpolicy"),
    layout=LAYOUT,
)
