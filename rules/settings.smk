# How the rules reach their study's settings (skillrepro.check.STUDIES): study_settings(study) for the typed
# settings, settings(study, kind) for the params entry that reruns a job when what it reads changes. Included by
# rules/common.smk, before every study's rules.
from skillrepro import check


def study_settings(study):
    """The typed settings of `study`, built once per invocation (the Snakefile's check has refused a bad key of a
    section the config sets, a ConfigError naming it, before any rule file is read)."""
    if study not in _SETTINGS:
        _SETTINGS[study] = check.study(study).settings(config)
    return _SETTINGS[study]


def settings(study, kind, **wildcard_of):
    """A params entry: the fingerprint of exactly the config settings a job of `study` of `kind` reads (declared
    in the study's contract object; skillrepro.check.job_fingerprint). Snakemake records params of plain types
    only, so the job's start-up (start_job) rebuilds its typed settings from the config and the rule carries this string
    instead; the job reruns when one of those settings changes, and only then (key order is no change).
    `wildcard_of` names the wildcard that stands for one the fingerprint is keyed by (bench="target": the
    instance a run is evaluated on); a keyed wildcard the job lacks is read under the study's alias for it
    (contract.Study.keyed, as the job's start-up reads it). Each distinct fingerprint is computed once per
    invocation (the config does not change during one), not once per job; an undeclared kind stops the workflow
    as it is read. A job of a study the config does not configure stops the workflow as its DAG is built, before
    any job, naming the section: without it the study's tables would be written from no runs."""
    declared = check.study(study)
    declared.kind(kind)

    def fingerprint(w):
        if declared not in check.configured(config):
            raise check.ConfigError(
                f"a target of the {study} study needs its config section ({' or '.join(declared.sections)}), "
                f"which this config does not set: give a preset that sets it, or ask for another target")
        values = declared.keyed(w, **wildcard_of)
        key = (study, kind, tuple(values.items()))
        if key not in _FINGERPRINTS:
            _FINGERPRINTS[key] = check.job_fingerprint(config, study, kind, built=study_settings(study), **values)
        return _FINGERPRINTS[key]

    return fingerprint


_SETTINGS: dict = {}
_FINGERPRINTS: dict = {}
