"""The study contract: what each study of the workflow declares, in one place, and STUDIES, the list of them.

A study owns config sections, checked against a schema; builds its typed settings from a config whose shared
sections are checked (skillrepro.config.validate), raising a ConfigError that names the key; names the kinds of
its jobs and what each kind reads of the config (a job's `settings` param is the fingerprint of exactly that, so
the job reruns when one of those settings changes, and only then); and names its rules' wildcards. Its rules live
in rules/<name>/, their scripts in workflow/scripts/<name>/.

The Snakefile's config check (skillrepro.check.check_config) builds the settings of every study whose section the
config sets, before any job; the rules reach them, and their fingerprints, through rules/settings.smk;
tests/studies/test_study_contract.py holds every study to what it declares here.

This module imports only skillrepro.config: a study's settings builder is named "module:attribute" and loaded
when it is called, as the registries load their entries, so reading the contract loads no study.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from skillrepro.config import (BenchmarkConfig, InducerLimits, LLMConfig, MethodConfig, Protocol, benchmarks,
                               inducer_limits, llm_config, methods, protocol)


@dataclass(frozen=True)
class Study:
    name: str
    sections: tuple[str, ...]  # the config sections it owns
    schema: str  # the schema file under src/skillrepro/schemas/ that checks them
    builder: str  # "module:attribute", a function config -> typed settings (a ConfigError naming the key)
    # job kind -> what a job of that kind reads: config keys ("section" or "section.key"); the study's fingerprint
    # function says how (its docstring), and a key written "!section.key" is one the kind leaves out
    reads: Mapping[str, tuple[str, ...]]
    keyed_by: tuple[str, ...]  # the wildcards a kind's fingerprint differs by (one fingerprint per value)
    wildcards: tuple[str, ...]  # every wildcard of its rules (rules/<name>/)
    # a read that names a part of the job's own instance rather than a config key: the key, `{wildcard}` the job's
    parts: Mapping[str, str] = field(default_factory=dict)
    # a keyed_by wildcard that some rules name otherwise: the other name (a rule's settings(..., sbench="hbench"))
    aliases: Mapping[str, str] = field(default_factory=dict)
    # "module:attribute" of a function (config, settings, kind, **keyed_by values) -> the digest of what a job of
    # that kind reads; "" for the plain one, skillrepro.check.settings_fingerprint over the kind's config keys
    fingerprint: str = ""
    # "module:attribute" of a function (config, settings, keyed_by values, the job's params) -> one job's typed
    # settings (skillrepro.pipeline.start_job); "" for the study's settings as they are
    job: str = ""

    def settings(self, config: dict[str, Any]) -> Any:
        """This study's typed settings of `config`: the builder, loaded now."""
        return load(self.builder)(config)

    def kind(self, kind: str) -> tuple[str, ...]:
        """What a job of `kind` reads; a kind the study does not declare is a mistake in a rule."""
        if kind not in self.reads:
            raise ValueError(f"study {self.name} has no job kind {kind!r}; its kinds: {', '.join(self.reads)}")
        return self.reads[kind]

    def keyed(self, wildcards: Any, **wildcard_of: str) -> dict[str, Any]:
        """The values of `keyed_by` for a job's Snakemake `wildcards` (None where it has none): each read under
        the wildcard `wildcard_of` names for it, else under its own name, else under the study's alias."""
        return {key: getattr(wildcards, wildcard_of.get(key) or (key if key in wildcards.keys()
                                                                else self.aliases.get(key, key)), None)
                for key in self.keyed_by}

    def keys(self, kind: str, **wildcards: str) -> tuple[str, ...]:
        """The config keys a job of `kind` reads, its parts named for the job's `wildcards`."""
        return tuple(self.parts.get(r, r).format(**wildcards) for r in self.kind(kind))


def load(reference: str) -> Any:
    """The object a "module:attribute" reference names, its module imported now."""
    module, _, attribute = reference.partition(":")
    target: Any = importlib.import_module(module)
    for name in attribute.split("."):
        target = getattr(target, name)
    return target


@dataclass(frozen=True)
class SpeedRunnerSettings:
    """The online wake/sleep loop's typed settings (its rules' module-level values, rules/common.smk)."""

    llm: LLMConfig
    inducer: InducerLimits
    protocol: Protocol
    benchmarks: dict[str, BenchmarkConfig]  # name -> instance
    methods: dict[str, MethodConfig]  # variant -> method


def speedrunner_settings(config: dict[str, Any]) -> SpeedRunnerSettings:
    """The main schema (config.validate) checks the loop's sections; this only types them."""
    return SpeedRunnerSettings(llm_config(config), inducer_limits(config), protocol(config),
                               {b.name: b for b in benchmarks(config)}, {m.variant: m for m in methods(config)})


SPEEDRUNNER = Study(
    name="speedrunner",
    sections=("methods", "benchmarks", "protocol"),
    schema="config.schema.yaml",
    builder="skillrepro.studies.contract:speedrunner_settings",
    # parts of skillrepro.check.settings_fingerprint: "benchmark", "call_budget" and "method" are the job's own
    # benchmarks.<bench> (without its call budget and evaluate_on), benchmarks.<bench>.llm_call_budget and
    # methods.<variant> (its options with their defaults)
    reads={
        "run": ("llm", "actor", "benchmark", "call_budget", "method"),  # a run's rollouts, sleep phases, evaluations
        "sleep": ("inducer",),  # a sleep phase's limits and model, beside its run's
        "tasks": ("benchmark",),  # a benchmark's task lists
        "instance": ("benchmark", "call_budget"),  # another instance a run is evaluated on (its `bench`)
    },
    keyed_by=("bench", "variant"),
    fingerprint="skillrepro.check:run_fingerprint",
    parts={"benchmark": "benchmarks.{bench}", "call_budget": "benchmarks.{bench}.llm_call_budget",
           "method": "methods.{variant}"},
    wildcards=("bench", "variant", "seed", "k", "split", "target", "n"),
)

SCAFFOLD = Study(
    name="scaffold",
    sections=("scaffold",),
    schema="scaffold.schema.yaml",
    builder="skillrepro.studies.scaffold.settings:ScaffoldConfig.from_config",
    # keys of the scaffold section (skillrepro.check.scaffold_fingerprint); every kind also reads the llm section
    # and its benchmark with its call budget. A job's inputs carry the rest: a Post-Scout reruns when its
    # selection does.
    reads={
        "play": ("scaffold.split", "scaffold.splits", "scaffold.n_queries", "scaffold.executor",
                 "scaffold.training.query_batch_size"),  # queries and every rollout
        "evidence": ("scaffold.evidence_max_chars", "scaffold.evidence_max_tokens"),
        "generate": ("scaffold.card", "scaffold.generator_decoding", "scaffold.generator_max_tokens",
                     "scaffold.n_candidates", "scaffold.generator_prompts", "scaffold.generator_reply"),
        "score": ("scaffold.scorer.backend", "scaffold.scorer.model", "scaffold.scorer.batch_tokens"),
        "select": ("scaffold.ablations",),
        "heldout": ("scaffold.heldout", "scaffold.split", "scaffold.splits", "scaffold.executor"),
        "update": ("scaffold", "!scaffold.heldout"),  # a GRPO update: the whole section but the held-out evaluation
    },
    keyed_by=("sbench",),
    aliases={"sbench": "hbench"},  # the held-out rules' instance
    fingerprint="skillrepro.check:scaffold_fingerprint",
    job="skillrepro.studies.scaffold.grpo:scaffold_job",
    wildcards=("sbench", "svariant", "i", "k", "hbench", "hpolicy"),
)

KVCACHE = Study(
    name="kvcache",
    sections=("kvcache",),
    schema="kvcache.schema.yaml",
    builder="skillrepro.studies.kvcache.settings:kv_settings",
    # one digest of the whole section, the benchmark it plays and the llm settings of the job's model (of every
    # model for a job across models): skillrepro.check.kvcache_fingerprint
    reads={"study": ("kvcache", "llm")},
    keyed_by=("kvmodel",),
    fingerprint="skillrepro.check:kvcache_fingerprint",
    job="skillrepro.studies.kvcache.settings:kvcache_job",
    wildcards=("kvmodel", "kvfmt", "kvseed", "kvblocks"),
)

STUDIES = (SPEEDRUNNER, SCAFFOLD, KVCACHE)


def study(name: str) -> Study:
    """The study called `name` (a rule's `settings(study, kind)`)."""
    found = {s.name: s for s in STUDIES}
    if name not in found:
        raise ValueError(f"no study {name!r}; the studies: {', '.join(found)}")
    return found[name]
