"""The `kvcache:` config section (checked by src/skillrepro/schemas/kvcache.schema.yaml) as typed settings: the
study's runs (benchmark, formats, games, seeds, models or a replay), the simulated settings (policy, capacity,
lockstep concurrency) and the simulator's vLLM; a KV-cache job's settings (`kvcache_job`) and fingerprint; the
study's contract object (`KVCACHE`). Every value the workflow cannot honour is refused here, before any work, with a
ConfigError naming its key. The analyses of the recorded runs are in study.py."""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from skillrepro.config import BenchmarkConfig, ConfigError, LLMConfig, fingerprint, validate_section
from skillrepro.llm.vllm_env import int_option
from skillrepro.studies.kvcache import sim
from skillrepro.studies.contract import Study
from skillrepro.studies.kvcache.formats import load_bank
from skillrepro.studies.kvcache.paths import LAYOUT


@dataclass(frozen=True)
class Setting:
    """One simulated setting: a cache policy at a KV capacity with N episodes in lockstep (`KVConfig.settings`)."""

    policy: str
    capacity_tokens: int
    concurrency: int


# A preset value the user must replace before the study starts (the GPU preset's SkillRL bank).
PLACEHOLDER_HINTS = {
    "bank": "set it to SkillRL's ALFWorld skill bank, memory_data/alfworld/claude_style_skills.json of "
            "github.com/aiming-lab/SkillRL (55 entries), or to null for the shipped default bank (34 entries, "
            "our wording; docs/deviations.md)",
    # kvcache.models[<name>].llm.model in the GPU preset: the seminar's three models (seed 001, 2-0)
    "model": "set it to the model's folder (a Hugging Face checkpoint vllm serve can load) or its Hugging Face id; "
             "the seminar's models are Qwen2.5-7B-Instruct (the base model) and SkillRL's SFT and RL checkpoints "
             "of it (github.com/aiming-lab/SkillRL)",
}


def is_placeholder(value) -> bool:
    """`<...>` marks a value a preset leaves for the user to fill in."""
    return isinstance(value, str) and value.strip().startswith("<") and value.strip().endswith(">")


@dataclass(frozen=True)
class KVConfig:
    """The `kvcache:` section (src/skillrepro/schemas/kvcache.schema.yaml), defaults filled in by the schema."""

    benchmark: str
    formats: tuple[str, ...]
    n_games: int
    split: str
    task_seed: int
    seeds: tuple[int, ...]
    call_budget: int
    max_tokens: int | None
    parallel_episodes: int
    bank: str | None
    templates_dir: str | None
    prefix_step: int
    prefix_tokenizer: str
    block_size: int
    capacity_tokens: tuple[int, ...]
    policies: tuple[str, ...]
    concurrency: tuple[int, ...]
    max_num_seqs: int
    max_num_batched_tokens: int
    server_slots: int
    replay: str | None = None  # model-free: "planner", a trajectories JSON file or a recorded run folder
    models: tuple[tuple[str, str], ...] = ()  # (name, JSON of llm overrides); empty: the llm section's model
    blend: tuple[tuple[str, object], ...] = ()  # the `blend:` settings as sorted (key, value) pairs
    group_size: int = 1  # GRPO-style: each game this many times in its lockstep batch (lockstep_requests)
    draw_pool: int | None = None  # each episode slot draws its game from this many, with replacement
    vllm_version: str = sim.VLLM_VERSION  # whose scheduler the simulator follows (sim.VLLM_VERSIONS)
    lockstep: bool = False  # a served run's episodes advance in lockstep groups (actor.run_format), not free-running
    engine_kv_blocks: tuple[int, ...] = ()  # KV sizes (blocks) at which runs are replayed on vLLM (engine.py)
    engine_formats: tuple[str, ...] = ()  # the formats so replayed; empty: every format

    @classmethod
    def from_config(cls, config: dict) -> "KVConfig":
        kv = dict(config.get("kvcache") or {})
        names = {f for f in cls.__dataclass_fields__}
        # vLLM's name is the key; the study's first spelling stays an alias
        if "max_batched_tokens" in kv:
            old = kv.pop("max_batched_tokens")
            new = kv.get("max_num_batched_tokens", old)
            if new != old and new != sim.DEFAULT_MAX_BATCHED_TOKENS:
                raise ConfigError(f"config key kvcache: max_batched_tokens ({old}) is the old name of "
                                  f"max_num_batched_tokens ({new}); give one of them")
            kv["max_num_batched_tokens"] = old
        unknown = sorted(set(kv) - names)
        if unknown:
            raise ConfigError(f"config key kvcache: unknown key(s) {', '.join(unknown)}")
        for key in ("formats", "seeds", "capacity_tokens", "policies", "concurrency", "engine_kv_blocks",
                    "engine_formats"):
            if key in kv:
                kv[key] = tuple(kv[key])
        models = kv.get("models") or []
        names = [m["name"] for m in models]
        if len(set(names)) != len(names):
            raise ConfigError(f"config key kvcache.models: names must be unique, got {', '.join(names)}")
        if models and kv.get("replay"):
            raise ConfigError("config key kvcache.models: a replay (kvcache.replay) has no model; leave one of "
                              "them out")
        for m in models:  # the GPU preset's models stop the study until each names a real checkpoint
            for key, value in (m.get("llm") or {}).items():
                if is_placeholder(value):
                    raise ConfigError(f"config key kvcache.models[{m['name']}].llm.{key} is still the preset's "
                                      f"placeholder {value!r}: " + PLACEHOLDER_HINTS.get(key, "set it"))
        kv["blend"] = tuple(sorted((kv.get("blend") or {}).items()))
        # frozen and hashable, and a plain value in Snakemake's params: the overrides as sorted JSON
        kv["models"] = tuple((m["name"], json.dumps(m.get("llm") or {}, sort_keys=True)) for m in models)
        for key in ("bank", "templates_dir"):
            if kv.get(key) and is_placeholder(kv[key]):
                raise ConfigError(f"config key kvcache.{key} is still the preset's placeholder {kv[key]!r}: "
                                  + PLACEHOLDER_HINTS.get(key, "set it to a path"))
            if kv.get(key) and not Path(kv[key]).exists():
                raise ConfigError(f"config key kvcache.{key}: {kv[key]} does not exist")
        try:  # a bank that breaks SkillRL's schema stops the study here, not mid-run
            load_bank(kv.get("bank"))
        except ValueError as e:
            raise ConfigError(f"config key kvcache.bank: {e}") from None
        if kv.get("replay") not in (None, "planner") and not Path(kv["replay"]).exists():
            raise ConfigError(f"config key kvcache.replay: {kv['replay']} is neither 'planner' nor an existing file "
                              "or folder")
        return cls(**kv)

    def bench(self, config: dict):
        """The benchmark instance the runs play: `benchmarks.<name>` when the config has it (its env must be
        alfworld), else plain generated ALFWorld when the name is `alfworld`."""
        benches = config.get("benchmarks") or {}
        if self.benchmark in benches:
            b = benches[self.benchmark]
            if b.get("env") != "alfworld":
                raise ConfigError(f"config key kvcache.benchmark: {self.benchmark!r} has env {b.get('env')!r}; the "
                                  "prompt formats are ALFWorld's, so it must be alfworld")
            return BenchmarkConfig(self.benchmark, "alfworld", b.get("llm_call_budget"), dict(b.get("options") or {}))
        if self.benchmark == "alfworld":
            return BenchmarkConfig("alfworld", "alfworld")
        raise ConfigError(f"config key kvcache.benchmark: {self.benchmark!r} is not a benchmark of `benchmarks:` "
                          f"(has {', '.join(sorted(benches)) or 'none'})")

    @property
    def blend_settings(self) -> dict:
        return dict(self.blend)

    @property
    def trajectory_source(self) -> str:
        """What the recorded trajectories come from: the replay source, else the planner (for blend)."""
        return self.replay or "planner"

    def model_llms(self, config: dict) -> dict:
        """Model name -> its LLMConfig: each `kvcache.models` entry is the llm section with its overrides;
        without entries, the llm section's model, named after it ("replay" in replay mode)."""
        base = dict(config.get("llm") or {})
        if self.replay:
            return {"replay": LLMConfig.from_dict(base)}
        if not self.models:
            return {model_name(LLMConfig.from_dict(base).model): LLMConfig.from_dict(base)}
        out = {}
        for name, overrides in self.models:
            extra = json.loads(overrides)
            unknown = sorted(set(extra) - set(LLMConfig.__dataclass_fields__))
            if unknown:
                raise ConfigError(f"config key kvcache.models[{name}].llm: unknown key(s) {', '.join(unknown)}")
            out[name] = LLMConfig.from_dict({**base, **extra})
        return out

    @property
    def max_batched_tokens(self) -> int:
        """The old name of `max_num_batched_tokens`."""
        return self.max_num_batched_tokens

    def settings(self) -> list[Setting]:
        return [Setting(p, c, n) for p in self.policies for c in self.capacity_tokens for n in self.concurrency]


@dataclass(frozen=True)
class KVJob:
    """The typed settings of one KV-cache job (rules/kvcache/)."""

    kv: KVConfig
    bench: BenchmarkConfig  # what the runs play (kvcache.benchmark)
    llm: LLMConfig | None  # the job's model's (its `kvmodel`); None for a job across models
    llms: dict[str, LLMConfig]  # every model of the study, by name


def kvcache_job(config: dict, kv: KVConfig, kind: str, keyed: dict, params: object) -> KVJob:
    """A KV-cache job's typed settings (KVCACHE.job, at skillrepro.pipeline.start_job)."""
    llms = kv.model_llms(config)
    return KVJob(kv, kv.bench(config), llms[keyed["kvmodel"]] if keyed["kvmodel"] else None, llms)


def kv_settings(config: dict) -> KVConfig:
    """The study's typed settings (KVCACHE's builder): the `kvcache` section checked
    against src/skillrepro/schemas/kvcache.schema.yaml with its defaults filled in, then against the rest of the config (the
    benchmark it plays, its models' llm settings). Every problem is a ConfigError naming the key."""
    kv = KVConfig.from_config({**config, "kvcache": validate_section(config, "kvcache")})
    kv.bench(config)
    stray = sorted(set(kv.engine_formats) - set(kv.formats))
    if stray:
        raise ConfigError(f"config key kvcache.engine_formats: {', '.join(stray)} not among kvcache.formats")
    llms = kv.model_llms(config)
    if kv.engine_kv_blocks and (kv.replay or any(l.backend != "vllm" for l in llms.values())):
        raise ConfigError("config key kvcache.engine_kv_blocks: replays on the vLLM engine need every model served "
                          "by llm.backend vllm (and no kvcache.replay)")
    # the simulator beside a served run must cut prompts into the engine's blocks: kvcache.block_size follows
    # the --block-size of the models' vLLM servers unless it is given, and must then agree with it
    served = {name: int_option(llm.vllm_args, "--block-size") for name, llm in llms.items() if llm.backend == "vllm"}
    served = {name: size for name, size in served.items() if size is not None}
    given = "block_size" in (config.get("kvcache") or {})
    for name, size in served.items():
        if size != (kv.block_size if given else next(iter(served.values()))):
            raise ConfigError(f"config key kvcache.block_size: {kv.block_size if given else 'not given'}, but "
                              f"model {name}'s vLLM serves blocks of {size} (--block-size in llm.vllm_args): "
                              "set both alike")
    if served and not given:
        kv = dataclasses.replace(kv, block_size=next(iter(served.values())))
    return kv


def kvcache_fingerprint(config: dict, kv: KVConfig, kind: str, *, kvmodel: str | None = None) -> str:
    """A KV-cache job's, of kind `kind` (KVCACHE's kinds): the benchmark the study plays, the fields of its typed
    settings the kind reads ("kvcache" all of them, "kvcache.<field>" one), and with "llm" the llm settings of the
    job's model `kvmodel` (of every model for a job across models, None). The typed settings, so that a block size
    the served models' vLLM sets (kv_settings) counts as one given."""
    chosen: list = [kv.bench(config)]
    for key in KVCACHE.kind(kind):
        if key == "llm":
            llms = kv.model_llms(config)
            chosen.append(llms[kvmodel] if kvmodel else llms)
        else:
            chosen.append(kv if key == "kvcache" else (key, getattr(kv, key.removeprefix("kvcache."))))
    return fingerprint(chosen)


KVCACHE = Study(
    name="kvcache",
    sections=("kvcache",),
    schema="kvcache.schema.yaml",
    builder=kv_settings,
    # kvcache_fingerprint. A job's inputs carry the rest: a simulation reruns when its run's requests do.
    reads={
        "tasks": ("kvcache.benchmark", "kvcache.n_games", "kvcache.split", "kvcache.task_seed", "kvcache.bank"),
        # a served run, or the trajectories a replay plays (not the simulator's settings: those rerun no run)
        "run": ("llm", "kvcache.bank", "kvcache.templates_dir", "kvcache.call_budget", "kvcache.max_tokens",
                "kvcache.parallel_episodes", "kvcache.lockstep", "kvcache.replay", "kvcache.prefix_tokenizer"),
        "simulate": ("kvcache.block_size", "kvcache.capacity_tokens", "kvcache.policies", "kvcache.concurrency",
                     "kvcache.max_num_seqs", "kvcache.max_num_batched_tokens", "kvcache.group_size",
                     "kvcache.draw_pool", "kvcache.task_seed", "kvcache.vllm_version"),
        "engine": ("llm", "kvcache.block_size", "kvcache.max_num_batched_tokens", "kvcache.vllm_version"),
        "study": ("kvcache", "llm"),  # the tables, figures and analyses over the runs
    },
    keyed_by=("kvmodel",),
    fingerprint=kvcache_fingerprint,
    job=kvcache_job,
    wildcards=("kvmodel", "kvfmt", "kvseed", "kvblocks"),
    layout=LAYOUT,
)


def games_note(task_ids: Sequence[str], split: str, data_path: str | None, benchmark: str = "alfworld") -> str:
    """Which games the study plays, said at its start: official ALFWorld games (ids `official:<folder>/...`)
    from `data_path`, or generated ones and how to get the official games instead."""
    if task_ids and all(t.startswith("official:") for t in task_ids):
        folders = sorted({t.split(":", 1)[1].split("/", 1)[0] for t in task_ids})
        return (f"KV-cache study plays {len(task_ids)} official ALFWorld games of split {split} "
                f"({', '.join(folders)}) from {data_path}")
    return (f"KV-cache study plays {len(task_ids)} generated ALFWorld games of split {split}, not the official "
            f"ones: set benchmarks.{benchmark}.options.data_path (or ALFWORLD_DATA) to the folder "
            "alfworld-download fills to play those")


def model_name(model: str) -> str:
    """A path-safe name for a model id or file ("Qwen/Qwen2.5-7B-Instruct" -> "Qwen2.5-7B-Instruct")."""
    stem = Path(model).name.removesuffix(".gguf") or model
    return re.sub(r"[^A-Za-z0-9._-]+", "_", stem)
