"""The study contract (skillrepro.studies.contract), Gymnasium-style: one check parametrised over
skillrepro.check.STUDIES, so a new study is held to it without editing a list here.

Every preset that sets a study's section builds that study's settings; a bad key of the section is one
ConfigError naming it, from the Snakefile's one config check; a kind's fingerprint ignores key order and changes
with a key the kind reads (not with one it leaves out); the rules name only declared kinds and wildcards, and
read no config value with a literal default in place of the schema's; a study's results layout reads back every
folder it writes, and no rule or script writes a `results/` path of its own.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import io
import itertools
import json
import os
import re
import subprocess
import sys
import tokenize
import typing
from pathlib import Path

import pytest
from snakemake.iocontainers import Wildcards  # a job's wildcards, as a script sees them

from skillrepro.check import STUDIES, check_config, job_fingerprint
from skillrepro.config import SCHEMAS, ConfigError, load_yaml, study_schemas, validate, validate_sections
from skillrepro.studies.contract import SettingsError, Study
from repo import ROOT, copy_workflow, scheduled, snakemake

PRESETS = [ROOT / "config.yaml", *sorted((ROOT / "configs").glob("*.yaml"))]
# every study's: the config check, the server, `settings`
SHARED_RULES = {"Snakefile", "rules/common.smk", "rules/settings.smk"}
ids = [s.name for s in STUDIES]


def as_loaded(preset: Path) -> dict:
    """A preset as the Snakefile loads it (alone, or over the preset it says it follows; tests/test_config.py),
    without the official data a user supplies and with a price where a billed preset leaves the provider's 0."""
    base = next((load_yaml(p) for p in PRESETS if f"add configs/{preset.name} after this file" in p.read_text()), {})
    config = {**base, **load_yaml(preset)}
    for bench in config["benchmarks"].values():
        (bench.get("options") or {}).pop("data_path", None)
    for model, rates in config["pricing"].items():
        config["pricing"][model] = {k: v or 1.0 for k, v in rates.items()}
    return config


def placeholder(value) -> bool:
    """Whether `value` holds one left for the user to fill in, `"<...>"` (kvcache-gpu's checkpoints)."""
    if isinstance(value, dict):
        return any(placeholder(v) for v in value.values())
    if isinstance(value, list):
        return any(placeholder(v) for v in value)
    return isinstance(value, str) and value.startswith("<") and value.endswith(">")


@pytest.mark.parametrize("study", STUDIES, ids=ids)
def test_the_study_is_declared_whole(study: Study):
    schema = SCHEMAS / study.schema
    assert schema.is_file(), f"{study.name}: no schema {schema}"
    # its own schema file, named after it, checks exactly the sections it owns, which no other file checks
    assert schema.name == f"{study.name}.schema.yaml"
    assert tuple(load_yaml(schema)["properties"]) == study.sections
    assert {s: p.name for s, p in study_schemas().items() if s in study.sections} == dict.fromkeys(study.sections, schema.name)
    # its declaration, and the functions it names, are its own package's: a study is a peer, not a guest
    home = f"skillrepro.studies.{study.name}"
    for function in (study.builder, study.fingerprint, study.job, study.check, study.models):
        if function is not None:
            assert function.__module__.startswith(home + "."), f"{study.name}: {function.__qualname__} of {function.__module__}"
    assert set(study.keyed_by) <= set(study.wildcards)
    assert study.reads and all(study.reads.values())
    # its targets, which the default target `all` takes where the config sets one of its sections
    rules = "".join(p.read_text() for p in sorted((ROOT / "rules" / study.name).glob("*.smk")))
    assert re.search(rf"^rule {study.name}_all:$", rules, re.M), f"{study.name}: no rule {study.name}_all"


@pytest.mark.parametrize("study", STUDIES, ids=ids)
def test_every_preset_that_sets_the_section_builds_the_settings(study: Study):
    presets = [p for p in PRESETS if set(study.sections) & set(load_yaml(p))]
    assert presets, f"no preset sets {study.name}'s section(s) {study.sections}"
    for preset in presets:
        config = validate(as_loaded(preset), check_files=False)
        if placeholder([config.get(s) for s in study.sections]):
            with pytest.raises(ConfigError, match="is still the preset's placeholder"):
                study.settings(config)
            continue
        assert study.settings(config) is not None, preset.name


@pytest.mark.parametrize("study", STUDIES, ids=ids)
def test_a_bad_key_stops_the_config_check_naming_it(study: Study):
    """Whatever the target: check_config is the Snakefile's one check, before any job."""
    for section in study.sections:
        config = load_yaml(ROOT / "config.yaml")
        config[section] = {**(config.get(section) or {}), "no_such_key": 1}
        with pytest.raises(ConfigError) as raised:
            check_config(config, check_files=False)
        message = str(raised.value)
        assert message.startswith(f"config key {section}") and "no_such_key" in message and "\n" not in message


# ------------------------------------------------------------------------------------------ fingerprints
def instance(study: Study, config: dict) -> dict:
    """Values of the wildcards a fingerprint is keyed by, for one job of `config`: its first benchmark and
    variant; none for a KV-cache model (a job across the study's models)."""
    first = {"bench": next(iter(config["benchmarks"])), "variant": next(iter(config.get("methods") or {}), None),
             "sbench": study.settings(config).benchmarks[0] if study.name == "scaffold" else None, "kvmodel": None}
    missing = set(study.keyed_by) - set(first)
    assert not missing, f"say here which value a {study.name} job's {missing} takes"
    return {name: first[name] for name in study.keyed_by}


def reversed_keys(value):
    """`value` with every mapping's keys in the opposite order."""
    if isinstance(value, dict):
        return {k: reversed_keys(value[k]) for k in reversed(list(value))}
    return [reversed_keys(v) for v in value] if isinstance(value, list) else value


def leaves(value, key: str, parts: tuple[str, ...] = ()):
    """(path, value) of every number and flag under config key `value`, or the key itself where nothing is set;
    a path is the tuple of its mapping keys (a model id such as qwen2.5-coder-0.5b has dots of its own)."""
    parts = parts or tuple(key.split("."))
    if isinstance(value, dict):
        for k in sorted(value):
            yield from leaves(value[k], key, (*parts, k))
    elif value is None or isinstance(value, (bool, int, float)):
        yield parts, value


def lookup(config: dict, path: str):
    node = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def changed(config: dict, path: tuple[str, ...], value) -> dict:
    """`config` with the leaf at `path` set to another value of its type (a count for an unset one)."""
    out = copy.deepcopy(config)
    *parents, last = path
    node = out
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = (not value if isinstance(value, bool) else value + 1 if isinstance(value, int)
                  else value / 2 + 0.01 if isinstance(value, float) else 7)
    return out


def preset_for(study: Study, kind: str) -> tuple[dict, dict]:
    """(config, wildcards) of the first preset that sets the study's section and a value under a key `kind`
    reads (an empty `pricing: {}` has none to change)."""
    for preset in PRESETS:
        if not set(study.sections) & set(load_yaml(preset)) or placeholder([load_yaml(preset).get(s)
                                                                               for s in study.sections]):
            continue
        config = validate(as_loaded(preset), check_files=False)
        config.update(validate_sections(config, study.schema))  # the defaults written out: each a key to change
        wildcards = instance(study, config)
        keys = study.keys(kind, **{k: v for k, v in wildcards.items() if v is not None})
        if any(list(leaves(lookup(config, k), k)) for k in keys if not k.startswith("!")):
            return config, wildcards
    raise AssertionError(f"no preset sets a key {study.name} {kind} reads")


@pytest.mark.parametrize("study", STUDIES, ids=ids)
def test_a_kinds_fingerprint_ignores_key_order_and_changes_with_what_it_reads(study: Study):
    for kind in study.reads:
        config, wildcards = preset_for(study, kind)
        made = job_fingerprint(config, study.name, kind, **wildcards)
        assert job_fingerprint(reversed_keys(config), study.name, kind, **wildcards) == made, kind
        keys = study.keys(kind, **{k: v for k, v in wildcards.items() if v is not None})
        left_out = [k[1:] for k in keys if k.startswith("!")]
        seen = []
        for key in (k for k in keys if not k.startswith("!")):
            tried = []
            for path, value in leaves(lookup(config, key), key):
                if any(".".join(path) == o or ".".join(path).startswith(o + ".") for o in left_out):
                    continue
                other = changed(config, path, value)
                try:
                    validate(copy.deepcopy(other), check_files=False)
                    study.settings(other)
                except ConfigError:
                    continue  # not a value the schema takes here: another leaf of the key
                tried.append(path)
                if job_fingerprint(other, study.name, kind, **wildcards) != made:
                    seen.append(path)
                    break
            else:
                # every valid change of the key left the fingerprint as it was: the kind does not read it
                assert not tried, f"{study.name} {kind}: changing {tried} does not change its fingerprint"
        assert seen, f"{study.name} {kind}: no key it reads ({keys}) could be changed to test its fingerprint"
        for key in left_out:  # a key the kind leaves out changes nothing
            for path, value in list(leaves(lookup(config, key), key))[:3]:
                other = changed(config, path, value)
                try:
                    study.settings(other)
                except ConfigError:
                    continue
                assert job_fingerprint(other, study.name, kind, **wildcards) == made, f"{kind}: {path}"


@pytest.mark.parametrize("study", STUDIES, ids=ids)
def test_a_job_starts_only_under_the_settings_its_rule_recorded(study: Study):
    """skillrepro.pipeline.start_job: each kind's job, its rule's fingerprint in hand, gets the study's typed
    settings; under a config that changed what the kind reads (a job run by hand under another config, or
    Snakemake's records lost), it stops with a SettingsError naming both fingerprints."""
    from types import SimpleNamespace

    from skillrepro.pipeline import start_job

    preset = next(p for p in PRESETS if set(study.sections) & set(load_yaml(p))
                  and not placeholder([load_yaml(p).get(s) for s in study.sections]))
    config = validate(as_loaded(preset), check_files=False)
    wildcards = {k: v for k, v in instance(study, config).items() if v is not None}
    if study.name == "kvcache":  # one model's job
        wildcards["kvmodel"] = next(iter(study.settings(config).model_llms(config)))
    refused = []
    for kind in study.reads:
        job = SimpleNamespace(wildcards=Wildcards(fromdict=wildcards), params=SimpleNamespace(
            settings=job_fingerprint(config, study.name, kind, **wildcards), policy=""), config=config, log=[],
            rule=f"a {kind} job")
        started = start_job(job)
        assert (started.study, started.kind, started.log.name) == (study.name, kind, f"skillrepro.a {kind} job")
        assert started.settings is not None
        other = copy.deepcopy(config)
        other["llm"]["temperature"] = config["llm"].get("temperature", 0.7) + 0.1  # every kind but the task lists
        if job_fingerprint(other, study.name, kind, **wildcards) == job.params.settings:
            continue
        with pytest.raises(SettingsError, match=f"its rule's settings fingerprint {study.name}/{kind}:"):
            start_job(SimpleNamespace(**{**vars(job), "config": other}))
        refused.append(kind)
    assert refused, f"{study.name}: no kind reads llm.temperature, so none was tried under another config"


def test_every_script_starts_through_the_one_job_start_up():
    """Each workflow script lives in its study's folder, its first use of `snakemake` is start_job (its log, its
    settings checked and typed), and it reads no settings from the config but those."""
    homes = {p.name for p in (ROOT / "workflow/scripts").iterdir() if p.name != "__pycache__"}
    assert homes == {s.name for s in STUDIES}, "workflow/scripts/ holds one folder per study and nothing else"
    for script in sorted((ROOT / "workflow/scripts").glob("*/*.py")):
        body = [line for line in script.read_text().splitlines() if "snakemake" in line
                and not line.lstrip().startswith(("#", '"""')) and "import" not in line]
        assert body and "start_job(snakemake)" in body[0], f"{script.name} starts with {body[:1]}"
        # its settings come from start_job alone: no script types the config itself
        assert "snakemake.config" not in script.read_text(), f"{script.name} reads snakemake.config"


@pytest.mark.parametrize("preset,study", [("config.yaml", "speedrunner"), ("configs/kvcache.yaml", "kvcache"),
                                          ("configs/scaffold.yaml", "scaffold")])
def test_the_default_target_is_the_configured_studies_targets(tmp_path, preset, study):
    """`snakemake` without a target plans the studies whose sections the config sets, and only those: a preset of
    the KV-cache study or of SkillScaffold sets no section of SpeedRunner's loop (methods, protocol, inducer)."""
    config = load_yaml(ROOT / preset)
    assert bool(set(config) & {"methods", "protocol", "inducer"}) == (study == "speedrunner"), preset
    copy_workflow(tmp_path)
    dry = snakemake("-n", "--cores", "1", "--configfile", str(ROOT / preset), cwd=tmp_path,
                    env=dict(os.environ, SKILLREPRO_LLM_URL="http://127.0.0.1:9/v1"))
    planned = scheduled(dry.stdout) - {"all"}
    others = {s.name for s in STUDIES} - {study}
    assert planned and not {r for r in planned if r.startswith(tuple(f"{o}_" for o in others))}, planned
    if study != "speedrunner":
        assert all(r.startswith(f"{study}_") for r in planned), planned


@pytest.mark.parametrize("study,preset,target", [("speedrunner", "configs/kvcache.yaml", "results/tables/main.csv"),
                                                 ("kvcache", "config.yaml", "kvcache_all"),
                                                 ("scaffold", "config.yaml", "results/tables/scaffold_rules.csv")])
def test_a_target_of_a_study_the_config_does_not_set_fails_before_any_job(tmp_path, study, preset, target):
    """A config needs only llm and benchmarks, so a study's target on a config without the study's section once
    planned its tables over no runs and wrote a header-only main.csv (exit 0). It stops as the DAG is built,
    naming the section, and writes nothing."""
    copy_workflow(tmp_path)
    run = snakemake(target, "--cores", "1", "--configfile", str(ROOT / preset), cwd=tmp_path, check=False,
                    env=dict(os.environ, SKILLREPRO_LLM_URL="http://127.0.0.1:9/v1"))
    sections = next(s for s in STUDIES if s.name == study).sections
    assert run.returncode != 0 and f"a target of the {study} study needs its config section ({' or '.join(sections)})" \
        in run.stdout + run.stderr, (run.stdout + run.stderr)[-2000:]
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()


# ------------------------------------------------------------------------------------------ rules
def rule_files() -> dict[str, str]:
    """Every rules file, by its path under rules/: the shared ones, and each study's in rules/<study>/."""
    return {str(p.relative_to(ROOT / "rules")): p.read_text() for p in sorted((ROOT / "rules").rglob("*.smk"))}


# A rule's fingerprint param: `settings("<study>", "<kind>", ...)` (rules/settings.smk), the one way.
SETTINGS_PARAM = re.compile(r'^\s+(\w+)=settings\("(\w+)", "(\w+)"[^)]*\),?$')


def test_every_rules_settings_name_a_declared_kind():
    studies = {s.name: s for s in STUDIES}
    used, stray = set(), []
    for name, text in rule_files().items():
        in_docstring = False
        for n, line in enumerate(text.splitlines(), 1):
            if line.count('"""') % 2:
                in_docstring = not in_docstring
            m = SETTINGS_PARAM.match(line)
            if m:
                study, kind = m[2], m[3]
                assert study in studies and kind in studies[study].reads, f"rules/{name}:{n}: {line.strip()}"
                used.add((study, kind))
            # a call of a settings helper or a fingerprint function (not a study's `.settings(config)` builder)
            elif (re.search(r"(?<![.\w])settings\(|fingerprint\(", line) and not in_docstring
                  and not re.match(r"\s*(def |#)", line)):
                stray.append(f"rules/{name}:{n}: {line.strip()}")
    # the helper itself computes the fingerprint; nothing else in rules/ does
    helpers = ["check.job_fingerprint(config, study, kind, built=study_settings(study), **values)"]
    stray = [s for s in stray if not any(h in s for h in helpers)]
    assert not stray, "a fingerprint outside settings(study, kind):\n" + "\n".join(stray)
    declared = {(s.name, k) for s in STUDIES for k in s.reads}
    assert used == declared, f"declared kinds no rule uses: {sorted(declared - used)}"


# No `.get(key, literal)` on a config value in rules/: the schema's defaults, filled in by the Snakefile's check,
# are the one list of them (the test set-ups run the Snakefile with a study's target, tests/workflow/test_workflow.py).
LITERAL_DEFAULTS: set = set()
GET = re.compile(r"((?:[\w.]+|\([^()]*\))(?:\.get\([^()]*\)|\[[^\]]*\])*)\.get\(([^(),]+),\s*([^()]+|\w+\([^()]*\))\)")


def test_no_config_value_in_rules_is_read_with_a_literal_default():
    found = set()
    for name, text in rule_files().items():
        for m in GET.finditer(text):
            receiver, default = m.group(1), m.group(3).strip()
            try:
                ast.literal_eval(default)
            except (ValueError, SyntaxError):
                if "ROLLOUT_WALL_S" not in default:  # a constant standing for the schema's default
                    continue
            if receiver.startswith(("os.environ", "r.resources", "job.resources", "ENV_MB", "EMBEDDED")):
                continue  # not the config: the environment, a rule's resources, the memory tables
            found.add((name, m.group(0)))
    assert found == LITERAL_DEFAULTS, f"found: {sorted(found)}"


def test_every_wildcard_of_the_rules_is_a_declared_wildcard_of_their_study(tmp_path):
    """Read from the workflow as Snakemake parses it (every rule file is included by the Snakefile), in a copy."""
    copy_workflow(tmp_path)
    wrapper = tmp_path / "rules.smk"
    wrapper.write_text(f'include: "{tmp_path / "Snakefile"}"\nimport json as _json, os as _os\n'
                       'print("RULES " + _json.dumps({r.name: [_os.path.relpath(r.snakefile, workflow.basedir), '
                       'sorted(r.wildcard_names)] for r in workflow.rules}))\n')
    env = dict(os.environ, SKILLREPRO_LLM_URL="http://127.0.0.1:9/v1")  # no model server for a dry run
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "-s", str(wrapper),
                           "results/tables/main.csv", "--configfile", "config.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RULES ")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-2000:]
    owner = {s.name: s for s in STUDIES}
    found: dict[str, set[str]] = {s.name: set() for s in STUDIES}
    for rule, (file, names) in json.loads(line.removeprefix("RULES ")).items():
        if file in SHARED_RULES:
            assert not names, f"rule {rule} in {file} has wildcards but belongs to no study"
            continue
        home = Path(file).parts
        assert home[0] == "rules" and len(home) == 3 and home[1] in owner, \
            f"{file} (rule {rule}) is no study's: a study's rules live in rules/<study>/"
        found[home[1]] |= set(names)
    for study in STUDIES:
        assert found[study.name] == set(study.wildcards), study.name


# ------------------------------------------------------------------------------------------ results layout
# values a layout field takes in the round trip: names a study allows (one a word the scaffold layout reserves)
SAMPLES = {str: ["babyai", "sciworld_electricity", "grp-nogen_random", "a", "direct"], int: [0, 1, 12], bool: [False, True]}


def field_values(kind: type, field: dataclasses.Field) -> list:
    hint = typing.get_type_hints(kind)[field.name]
    if typing.get_origin(hint) is typing.Literal:
        return list(typing.get_args(hint))
    values = [v for t in typing.get_args(hint) or (hint,) for v in ([None] if t is type(None) else SAMPLES[t])]
    return values + ([field.default] if field.default is not dataclasses.MISSING else [])


def folders(kind: type) -> list:
    """Every value of `kind` the sample values make (a combination its own checks refuse is not one)."""
    fields = dataclasses.fields(kind)
    out = []
    for combo in itertools.product(*(field_values(kind, f) for f in fields)):
        try:
            out.append(kind(*combo))
        except ValueError:
            continue
    return out


@pytest.mark.parametrize("kind", [k for s in STUDIES for k in s.layout], ids=lambda k: k.__name__)
def test_a_layout_reads_back_every_folder_it_writes(kind: type):
    """A kind's `of` inverts its `folder`, for the folder, a record under it, and the same under another root."""
    found = folders(kind)
    assert found, f"{kind.__name__}: no value to write"
    for value in found:
        for path in (value.folder, f"{value.folder}/episodes.parquet", f"/home/x/{value.folder}/a/b.json",
                     f"/work/scaffold/kvcache/runs/{value.folder}/c"):  # a working directory with such names
            assert kind.of(path) == value, (value, path)
    with pytest.raises(ValueError):
        kind.of("results/tables/main.csv")


def test_a_studys_layout_is_its_own():
    for study in STUDIES:
        for kind in study.layout:
            assert kind.__module__.startswith(f"skillrepro.studies.{study.name}."), (study.name, kind)


# a string literal whose text starts a path under results/ (a plain, raw or f-string)
RESULTS_LITERAL = re.compile(r'^[rRfF]{0,2}("""|\'\'\'|"|\')results/')


def test_no_rule_or_script_writes_a_results_path_of_its_own():
    """Rules and scripts build their paths from their study's layout (studies/<name>/paths.py) and the shared top
    (studies/contract.py): a `results/` literal beside it would be a second writer the parsers do not know."""
    files = [ROOT / "Snakefile", *sorted((ROOT / "rules").rglob("*.smk")),
             *sorted((ROOT / "workflow/scripts").rglob("*.py"))]
    found = []
    for path in files:
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if tok.type == tokenize.STRING and RESULTS_LITERAL.match(tok.string):
                found.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.string[:60]}")
    assert not found, "\n".join(found)


# ------------------------------------------------------------------------------------------ docs
@pytest.mark.workflow
def test_the_add_a_study_example_runs_as_written(tmp_path):
    """docs/pipeline.md's "Add a study": its files written into a copy of the workflow and the package, exactly two
    shared files edited, then the study's target made through snakemake; its config key is checked before any job,
    and only a setting its kind reads reruns it."""
    import shutil

    section = (ROOT / "docs/pipeline.md").read_text().split("## Add a study", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```\w+\n# (\S+)\n(.*?)```", section, re.DOTALL)
    copy_workflow(tmp_path)
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shared = []
    for path, code in blocks:
        target = tmp_path / path
        if path == "src/skillrepro/check.py":  # its import after the studies', its STUDIES line for the old one
            imported, listing = code.strip().split("\n\n")
            text = target.read_text()
            last = list(re.finditer(r"^from skillrepro\.studies\..*$", text, re.M))[-1]
            text = text[:last.end()] + "\n" + imported + text[last.end():]
            text, n = re.subn(r"^STUDIES: .*$", listing, text, flags=re.M)
            assert n == 1 and imported.startswith("from ") and "OPENINGS)" in listing
            target.write_text(text)
            shared.append(path)
        elif path == "Snakefile":  # after the last include
            text = target.read_text()
            last = list(re.finditer(r'^include: ".*"$', text, re.M))[-1]
            target.write_text(text[:last.end()] + "\n" + code.strip() + text[last.end():])
            shared.append(path)
        else:
            assert not target.exists(), f"{path} is not a new file"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(code)
    assert sorted(shared) == ["Snakefile", "src/skillrepro/check.py"]
    assert len(blocks) == 6

    config = (tmp_path / "config.yaml").read_text()
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "src"))
    env.pop("SKILLREPRO_LLM_URL", None)

    def snakemake(extra: str, *args, target: tuple[str, ...] = ("openings_all",)):
        (tmp_path / "config.yaml").write_text(config + extra)
        return subprocess.run([sys.executable, "-m", "snakemake", *target, "--cores", "1", *args],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)

    bad = snakemake("openings: {n: 2, m: 1}\n", "-n")
    assert bad.returncode != 0 and "config key openings" in bad.stdout + bad.stderr, (bad.stdout + bad.stderr)[-2000:]
    made = snakemake("openings: {n: 2}\n")
    assert made.returncode == 0, made.stderr[-3000:]
    table = __import__("pandas").read_csv(tmp_path / "results/tables/openings.csv")
    assert len(table) == 2 and set(table.benchmark) == {"babyai"} and table.opening.str.startswith("Mission: ").all()
    assert "2 openings" in (tmp_path / "logs/openings.log").read_text()
    # a key the kind does not read, then one it does (written-out defaults are no change)
    assert "Nothing to be done" in snakemake("openings: {n: 2, seed: 0}\nbudgets: {inducer_requests: 3}\n", "-n").stdout
    assert "rule openings:" in snakemake("openings: {n: 2, seed: 1}\n", "-n").stdout
    # the default target, `all`, is the union of the configured studies' `<study>_all`: the new one's joins it
    assert "rule openings:" in snakemake("openings: {n: 2, seed: 1}\n", "-n", target=()).stdout
    planned = snakemake("", "-n", "--forceall", target=())
    assert planned.returncode == 0 and "rule sample_tasks:" in planned.stdout, planned.stderr[-2000:]
    assert "rule openings:" not in planned.stdout
