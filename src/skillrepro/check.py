"""The configuration checks that need the registries, and the settings fingerprint of a job.

skillrepro.config is the bottom layer (typed settings, the schema, checks that need nothing else); this module
sits on top of the registries (methods, benchmarks, shipped models) and is what the Snakefile calls once,
before any job is scheduled. Every error is a config.ConfigError naming the key.
"""
from __future__ import annotations

import dataclasses
from dataclasses import MISSING, replace
from pathlib import Path
from typing import Any

from skillrepro import benchmarks as benchmark_registry
from skillrepro.agent import Prompts
from skillrepro.config import (OPERATIONAL_LLM_KEYS, ConfigError, actor_config, benchmarks, file_digest, fingerprint,
                               protocol, validate, validate_section)
from skillrepro.llm.models import MODELS
from skillrepro.methods import check_benchmarks, get_method, registry
from skillrepro.studies import contract
from skillrepro.studies.kvcache.settings import KVConfig
from skillrepro.studies.scaffold.settings import ScaffoldConfig, parse_instance


def check_config(config: dict[str, Any], *, check_files: bool = True, billing: bool = True) -> dict[str, Any]:
    """`config` validated (skillrepro.config.validate) and checked against the registries: a shipped model's
    name, each variant's method and options and the benchmarks it runs on, the truncation analysis's
    options, and the task pools; then the settings of every study whose section the config sets built
    (studies.contract.STUDIES: each section against its own schema and the rest of the config), so that a bad key
    of any study stops here, before any job, whichever target was asked for. Returns it with the schema's
    defaults; nothing is started or written.
    `billing=False`: a billed backend's key and prices are not asked for (config.check_billing, at a real run's start)."""
    config = validate(config, check_files=check_files, billing=billing)
    llm = config["llm"]
    for key, model in (("llm.model", llm["model"]), ("inducer.model", config["inducer"]["model"])):
        if model and llm["backend"] == "embedded" and model not in MODELS and not model.endswith(".gguf"):
            raise ConfigError(f"config key {key}: {model!r} is neither a shipped model "
                              f"({', '.join(MODELS)}) nor a .gguf file")
        if model and llm["backend"] == "embedded" and model.endswith(".gguf") and check_files and not Path(model).is_file():
            raise ConfigError(f"config key {key}: {model} does not exist")
    # Names outside a registry get the schema's message for a value outside a list: the list is the registry
    # (one home), which a new module joins by being there.
    for section, key, known in (("benchmarks", "env", benchmark_registry.names()), ("methods", "method", sorted(registry()))):
        for name, entry in config[section].items():
            if entry[key] not in known:
                raise ConfigError(f"config key {section}.{name}.{key}: {entry[key]!r} is not allowed; allowed values: "
                                  f"{', '.join(known)}")
    for variant, m in config["methods"].items():
        try:
            get_method(m["method"]).parse_options(m["options"], variant)
        except ConfigError as e:
            where = "" if str(e).startswith("config key") else f"config key methods.{variant}.method: "
            raise ConfigError(f"{where}{e}") from None
        unknown = sorted(set(m.get("benchmarks") or []) - set(config["benchmarks"]))
        if unknown:
            raise ConfigError(f"config key methods.{variant}.benchmarks: unknown benchmark(s) {', '.join(unknown)}; "
                              f"configured: {', '.join(config['benchmarks'])}")
        runs_on = m.get("benchmarks") or list(config["benchmarks"])
        check_benchmarks(variant, m["method"], m["options"], {b: config["benchmarks"][b]["env"] for b in runs_on})
    t = (config.get("analysis") or {}).get("truncation")
    if t:
        merged = {**(config["methods"][t["variant"]].get("options") or {}), **(t.get("options") or {})}
        get_method(config["methods"][t["variant"]]["method"]).parse_options(
            merged, f"{t['variant']} (with analysis.truncation.options)")
    actor = actor_config(config)
    if "skill_reminder" in dict(actor.prompt_files) and not actor.restate_skills:
        raise ConfigError("config key actor.prompts.skill_reminder: a reminder file is given but "
                          "actor.restate_skills is false, so it would never be shown; set restate_skills: true")
    if check_files:
        try:
            Prompts.configured(actor)
        except ValueError as e:  # "prompt <name>: ..."
            raise ConfigError(f"config key actor.prompts.{str(e).removeprefix('prompt ')}") from None
    proto = protocol(config)
    for b in benchmarks(config):
        try:
            bench = benchmark_registry.load_benchmark(b)
        except benchmark_registry.TaskError as e:
            raise ConfigError(f"config key benchmarks.{b.name}: {e}") from None
        for split, n, key in (("train", proto.train_rollouts, "train_rollouts"), ("test", proto.n_test, "n_test")):
            pool = bench.pool_size(split)
            if pool is not None and n > pool:
                raise ConfigError(f"config key protocol.{key}: {n} {split} tasks asked for, but benchmark "
                                  f"{b.name} ({b.env}) has {pool} {split} tasks")
    for study in contract.STUDIES:
        # A study the config leaves out is not checked here: SkillScaffold's defaults, say, ask a generator
        # template of every configured benchmark, which a benchmark added for the online loop has not got.
        if any(config.get(section) for section in study.sections):
            study.settings(config)
    return config


def job_fingerprint(config: dict[str, Any], study: str, kind: str, *, built: Any = None,
                    **wildcards: str | None) -> str:
    """The `settings` param of a job of `study` of `kind` (studies.contract): "<study>/<kind>:" and the
    fingerprint of what that kind reads, for the values of the study's `keyed_by` wildcards in `wildcards` (None
    where the job has none): the study's own fingerprint function, or the plain one over the config keys the
    kind reads. The study and kind lead the string, so that the job's start-up (skillrepro.pipeline.start_job)
    knows what to recompute. `built`: the study's typed settings of `config`, where the caller has them."""
    declared = contract.study(study)
    declared.kind(kind)
    built = declared.settings(config) if built is None else built
    if declared.fingerprint:
        digest = contract.load(declared.fingerprint)(config, built, kind, **wildcards)
    else:  # the study's own sections with their schema's defaults: writing a default out is no change
        own = {} if declared.schema == "config.schema.yaml" else {s: validate_section(config, s) for s in declared.sections}
        digest = settings_fingerprint({**config, **own}, declared.keys(kind, **{k: v for k, v in wildcards.items() if v}))
    return f"{study}/{kind}:{digest}"


def run_fingerprint(config: dict[str, Any], built: Any, kind: str, *, bench: str | None = None,
                    variant: str | None = None) -> str:
    """A SpeedRunner-loop job's: what its kind reads of its run's `bench` and `variant` (settings_fingerprint)."""
    return settings_fingerprint(config, contract.SPEEDRUNNER.kind(kind), bench=bench, variant=variant)


def kvcache_fingerprint(config: dict[str, Any], kv: KVConfig, kind: str, *, kvmodel: str | None = None) -> str:
    """A KV-cache job's (its one kind, `study`): the study's settings, the benchmark it plays and the llm
    settings of the job's model `kvmodel` (of every model for a job across models, None)."""
    llms = kv.model_llms(config)
    return fingerprint([kv, kv.bench(config), llms[kvmodel] if kvmodel else llms])


def settings_fingerprint(config: dict[str, Any], reads: tuple[str, ...], *, bench: str | None = None,
                         variant: str | None = None) -> str:
    """Fingerprint of exactly the config settings a job reads, for its rule's params: Snakemake records it and
    reruns the job when it changes (it drops dataclass params from that record).

    `reads` names parts: "llm" (without the operational keys); "actor" (with its prompt files' contents);
    "benchmark" (env and options), "call_budget"
    and "method" of the job's `bench` and `variant` (a method's options with their defaults filled in, so
    writing a default out is no change); "section.key" for one value (e.g. "protocol.n_test"), or a section's
    name for the whole section (e.g. "inducer", with the schema's defaults filled in).
    """
    chosen: dict[str, Any] = {}
    for part in reads:
        if part == "llm":
            chosen[part] = {k: v for k, v in config["llm"].items() if k not in OPERATIONAL_LLM_KEYS}
        elif part == "benchmark":
            # evaluate_on adds test sets beside a run; it changes none of the run's own jobs
            chosen[part] = {k: v for k, v in config["benchmarks"][bench].items()
                            if k not in ("llm_call_budget", "evaluate_on")}
        elif part == "call_budget":
            chosen[part] = config["benchmarks"][bench].get("llm_call_budget")
        elif part == "method":
            m = config["methods"][variant]
            options = get_method(m["method"]).parse_options(m.get("options"), variant)
            chosen[part] = {"method": m["method"], "options": options}
            # a prompt file the user replaces in place is a new setting too
            files = {f.name: ([file_digest(x) for x in v] if isinstance(v, (list, tuple)) else file_digest(v))
                     for f in dataclasses.fields(options)
                     if f.name.endswith("_file") and (v := getattr(options, f.name))}
            if files:
                chosen[part]["file_contents"] = files
        elif part == "actor":
            chosen[part] = {**config["actor"], "file_contents": {name: file_digest(path) for name, path in
                                                                 actor_config(config).prompt_files}}
        else:
            section, _, key = part.partition(".")
            chosen[part] = config[section][key] if key else config[section]
    return fingerprint(chosen)


# ----------------------------------------------------------------------------------------------------------
# SkillScaffold's jobs (rules/scaffold/): their settings fingerprint.
# The config's scaffold.scorer sub-section is three fields of ScaffoldConfig (and of the fingerprints made so far).
SCORER_FIELDS = {"scorer.backend": "scorer_backend", "scorer.model": "scorer_model",
                 "scorer.batch_tokens": "scorer_batch_tokens"}


def scaffold_fingerprint(config: dict[str, Any], scaffold: ScaffoldConfig, reads: str, *, sbench: str) -> str:
    """A SkillScaffold job's, of kind `reads` (studies.contract.SCAFFOLD's kinds) on instance `sbench`
    (<benchmark>[@<chain><k>]): the llm section, the benchmark and its call budget, and what the kind reads of
    the scaffold section (the Generator templates' contents too, which a user may edit in place): the typed section whole, but
    the keys it leaves out ("!scaffold.<key>", at their defaults), where it reads "scaffold"."""
    benchmark = parse_instance(sbench)[0]
    base = settings_fingerprint(config, ("llm", "benchmark", "call_budget"), bench=benchmark)
    keys = contract.SCAFFOLD.kind(reads)
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
                value = value.get(benchmark, {})
            elif name == "generator_reply":  # the benchmark's own reply form, written out or the paper's
                value = scaffold.card_format(config["benchmarks"][benchmark]["env"]).reply
            elif name == "card":  # the benchmark env's own format: another env's card is no change here
                value = scaffold.card_format(config["benchmarks"][benchmark]["env"])
            elif name == "heldout":
                value = [value.of(benchmark), value.rollouts]  # `every` only says which checkpoints there are
            chosen[key] = value.get(sub) if sub else value
    prompts = {env: file_digest(f) for env, f in scaffold.generator_prompts.items()}
    return fingerprint([base, chosen] + ([prompts] if prompts and reads in ("generate", "update") else []))
