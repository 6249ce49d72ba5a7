"""The workflow's studies (STUDIES), the configuration checks that need the registries, and the settings
fingerprint of a job.

skillrepro.config is the bottom layer (typed settings, the schema, checks that need nothing else); this module
sits on top of the registries (methods, benchmarks, shipped models) and of the studies' contract objects, and is
what the Snakefile calls once, before any job is scheduled. Every error is a config.ConfigError naming the key.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from skillrepro import benchmarks as benchmark_registry
from skillrepro.agent import Prompts
from skillrepro.config import ConfigError, LLMConfig, actor_config, benchmarks, validate, validate_sections
from skillrepro.llm.models import MODELS
from skillrepro.studies.contract import Study, settings_fingerprint
from skillrepro.studies.kvcache.settings import KVCACHE
from skillrepro.studies.scaffold.settings import SCAFFOLD
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
    if billing:
        check_billing(config, env=check_files)
    return config


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
