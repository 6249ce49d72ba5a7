"""The workflow's studies (STUDIES), the configuration checks that need the registries, and the settings
fingerprint of a job.

skillrepro.config is the bottom layer (typed settings, the schema, checks that need nothing else); this module
sits on top of the registries (methods, benchmarks, shipped models) and of the studies' contract objects, and is
what the Snakefile calls once, before any job is scheduled. Every error is a config.ConfigError naming the key.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from skillrepro import benchmarks as benchmark_registry
from skillrepro.agent import Prompts
from skillrepro.config import ConfigError, actor_config, benchmarks, validate, validate_section
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


def check_config(config: dict[str, Any], *, check_files: bool = True, billing: bool = True) -> dict[str, Any]:
    """`config` validated (skillrepro.config.validate) and checked against the registries: a shipped model's
    name, each benchmark's environment and options, the actor's prompts; then, for every study whose section the
    config sets (STUDIES), its registry checks (Study.check: SpeedRunner's methods and task pools) and its
    settings built (each section against its own schema and the rest of the config), so that a bad key of any
    study stops here, before any job, whichever target was asked for. Returns it with the schema's defaults;
    nothing is started or written.
    `billing=False`: a billed backend's key and prices are not asked for (config.check_billing, at a real run's start)."""
    config = validate(config, check_files=check_files, billing=billing)
    llm = config["llm"]
    for key, model in (("llm.model", llm["model"]), ("inducer.model", config["inducer"]["model"])):
        if model and llm["backend"] == "embedded" and model not in MODELS and not model.endswith(".gguf"):
            raise ConfigError(f"config key {key}: {model!r} is neither a shipped model "
                              f"({', '.join(MODELS)}) nor a .gguf file")
        if model and llm["backend"] == "embedded" and model.endswith(".gguf") and check_files and not Path(model).is_file():
            raise ConfigError(f"config key {key}: {model} does not exist")
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
    for declared in STUDIES:
        # A study the config leaves out is not checked here: SkillScaffold's defaults, say, ask a generator
        # template of every configured benchmark, which a benchmark added for the online loop has not got.
        if any(config.get(section) for section in declared.sections):
            if declared.check:
                declared.check(config)
            declared.settings(config)
    return config


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
    if declared.fingerprint:
        digest = declared.fingerprint(config, built, kind, **wildcards)
    else:  # the study's own sections with their schema's defaults: writing a default out is no change
        own = {} if declared.schema == "config.schema.yaml" else {s: validate_section(config, s) for s in declared.sections}
        digest = settings_fingerprint({**config, **own}, declared.keys(kind, **{k: v for k, v in wildcards.items() if v}))
    return f"{name}/{kind}:{digest}"
