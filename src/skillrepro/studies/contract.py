"""The study contract: what a study of the workflow declares, as one `Study` object its own package exports
(`SPEEDRUNNER` in studies/speedrunner/settings.py, `SCAFFOLD` and `KVCACHE` in their settings.py); skillrepro.check
lists them in STUDIES.

A study owns config sections, checked against a schema; builds its typed settings from a config whose shared
sections are checked (skillrepro.config.validate), raising a ConfigError that names the key; names the kinds of
its jobs and what each kind reads of the config (a job's `settings` param is the fingerprint of exactly that, so
the job reruns when one of those settings changes, and only then); and names its rules' wildcards. Its rules live
in rules/<name>/, their scripts in workflow/scripts/<name>/.

The Snakefile's config check (skillrepro.check.check_config) builds the settings of every study whose section the
config sets, before any job; the rules reach them, and their fingerprints, through rules/settings.smk;
tests/studies/test_study_contract.py holds every study to what it declares.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from skillrepro.config import OPERATIONAL_LLM_KEYS, fingerprint

# The results folder's shared top. A study writes its own folders under RESULTS and its tables, figures and job
# timings under these three; each study's paths module (studies/<name>/paths.py) writes its layout from them, and
# no rule or script writes a `results/` path of its own (tests/studies/test_study_contract.py).
RESULTS = "results"
TABLES = f"{RESULTS}/tables"
FIGURES = f"{RESULTS}/figures"
TIMINGS = f"{RESULTS}/timings"


class SettingsError(RuntimeError):
    """A job's settings are not those its outputs are recorded under: its rule's fingerprint is not the config's
    (Snakemake's records lost or stale), or its run's folder was started under others. It stops before any work."""


@dataclass(frozen=True)
class Study:
    name: str
    sections: tuple[str, ...]  # the top-level config sections it owns; set, they make it a configured study
    schema: str  # its schema file under src/skillrepro/schemas/, whose `properties` are those sections
    builder: Callable[[dict[str, Any]], Any]  # config -> the study's typed settings (a ConfigError naming the key)
    # job kind -> what a job of that kind reads: config keys ("section" or "section.key"); the study's fingerprint
    # function says how (its docstring), and a key written "!section.key" is one the kind leaves out
    reads: Mapping[str, tuple[str, ...]]
    keyed_by: tuple[str, ...]  # the wildcards a kind's fingerprint differs by (one fingerprint per value)
    wildcards: tuple[str, ...]  # every wildcard of its rules (rules/<name>/)
    # a read that names a part of the job's own instance rather than a config key: the key, `{wildcard}` the job's
    parts: Mapping[str, str] = field(default_factory=dict)
    # a keyed_by wildcard that some rules name otherwise: the other name (a rule's settings(..., sbench="hbench"))
    aliases: Mapping[str, str] = field(default_factory=dict)
    # (config, settings, kind, **keyed_by values) -> the digest of what a job of that kind reads; None for the
    # plain one, `settings_fingerprint` over the kind's config keys
    fingerprint: Callable[..., str] | None = None
    # (config, settings, kind, keyed_by values, the job's params) -> one job's typed settings
    # (skillrepro.pipeline.start_job); None for the study's settings as they are
    job: Callable[..., Any] | None = None
    # config -> None, or a ConfigError naming the key: the checks of its sections that need the registries (a
    # method's options, a benchmark's task pool), run once before any job (skillrepro.check.check_config) where
    # the config sets its sections; the builder's own checks run at every job's start too
    check: Callable[[dict[str, Any]], None] | None = None
    # config -> {config key: model} of the models its jobs call besides llm.model, named as llm.model is (checked
    # against the shipped ones, priced for a billed backend: skillrepro.check.models); None for none
    models: Callable[[dict[str, Any]], dict[str, str]] | None = None
    # its results' record-folder kinds: frozen dataclasses whose `folder` writes a path and whose classmethod
    # `of(path)` reads the kind back from that folder or anything under it (the contract test checks both ways)
    layout: tuple[type, ...] = ()

    def settings(self, config: dict[str, Any]) -> Any:
        """This study's typed settings of `config`."""
        return self.builder(config)

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


def settings_fingerprint(config: dict[str, Any], reads: tuple[str, ...], *, bench: str | None = None) -> str:
    """Fingerprint of exactly the config settings a job reads, for its rule's params: Snakemake records it and
    reruns the job when it changes (it drops dataclass params from that record).

    `reads` names parts: "llm" (without the operational keys); "benchmark" (env and options) and "call_budget" of
    the job's `bench`; "section.key" for one value (e.g. "protocol.n_test"), or a section's name for the whole
    section (e.g. "inducer", with the schema's defaults filled in). A study's own fingerprint adds its parts
    (SpeedRunner's "actor" and "method": studies/speedrunner/settings.py).
    """
    return fingerprint({part: config_part(config, part, bench) for part in reads})


def config_part(config: dict[str, Any], part: str, bench: str | None = None) -> Any:
    """One part of `settings_fingerprint`'s reads, as it is fingerprinted."""
    if part == "llm":
        return {k: v for k, v in config["llm"].items() if k not in OPERATIONAL_LLM_KEYS}
    if part == "benchmark":  # evaluate_on adds test sets beside a run; it changes none of the run's own jobs
        return {k: v for k, v in config["benchmarks"][bench].items() if k not in ("llm_call_budget", "evaluate_on")}
    if part == "call_budget":
        return config["benchmarks"][bench].get("llm_call_budget")
    section, _, key = part.partition(".")
    return config[section][key] if key else config[section]
