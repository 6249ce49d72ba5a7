"""Bad configuration stops with one message that names the key and what is allowed."""
import copy
from pathlib import Path

import pytest

from skillrepro.config import (ROLLOUT_WALL_S, SCHEMA, ConfigError, load_yaml, validate, validate_section,
                               validate_sections)
from skillrepro.check import billing_problems, check_billing, check_config, configured
from skillrepro.studies.speedrunner.settings import protocol, speedrunner_settings

ROOT = Path(__file__).resolve().parents[1]
BASE = load_yaml(ROOT / "config.yaml")


def with_change(path: str, value):
    cfg = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = cfg
    for p in parents:
        node = node[p]
    node[last] = value
    return cfg


def test_default_and_shipped_configs_are_valid():
    check_config(BASE)
    for preset in sorted((ROOT / "configs").glob("*.yaml")):
        # A preset given with --configfile replaces config.yaml (Snakefile); one that says it goes after
        # another ("add configs/x.yaml after this file") is checked over that one.
        base = next((load_yaml(p) for p in (ROOT / "configs").glob("*.yaml")
                     if f"add configs/{preset.name} after this file" in p.read_text()), {})
        merged = {**base, **load_yaml(preset)}
        for bench in merged["benchmarks"].values():
            # Official data the user supplies (scaffold-paper's ALFWorld): its absence is an error that names
            # the option (tests/benchmarks/test_env_alfworld.py); the rest of the preset is checked without it.
            (bench.get("options") or {}).pop("data_path", None)
        for model, rates in merged["pricing"].items():  # the provider's rates, which a billed preset leaves 0
            merged["pricing"][model] = {k: v or 1.0 for k, v in rates.items()}
        if '"<' in preset.read_text():  # a value the user fills in (kvcache-gpu's checkpoints): refused until then
            with pytest.raises(ConfigError, match="is still the preset's placeholder"):
                check_config(merged, check_files=False)
            continue
        check_config(merged, check_files=False)


@pytest.mark.parametrize(
    "path, value, expected",
    [
        ("llm.backend", "llamafile", "llm.backend: 'llamafile' is not allowed; allowed values: embedded, openai, vllm"),
        ("llm.colour", "red", "config key llm: unknown key(s) colour; allowed keys:"),
        ("llm.temperature", "hot", "config key llm.temperature: 'hot' has the wrong type"),
        ("llm.model", "/nowhere/model.gguf", "config key llm.model: model file /nowhere/model.gguf does not exist"),
        ("llm.model", "gpt-9", "config key llm.model: 'gpt-9' is neither a shipped model"),
        ("benchmarks.babyai.env", "minecraft", "config key benchmarks.babyai.env: 'minecraft' is not allowed; allowed values: alfworld, babyai, crafter, "),
        ("methods.react.method", "magic", "config key methods.react.method: 'magic' is not allowed; allowed values: asi, "),
        ("methods.react.method", "skillscaffold", "config key methods.react.method: 'skillscaffold' is not allowed"),
        ("methods.react.options", {"rounds": 2}, "config key methods.react.options: unknown option(s) rounds; allowed: none"),
        ("budgets.rollout_wall_s", -5, "config key budgets.rollout_wall_s: -5 must be > 0"),
        ("protocol.n_test", -1, "config key protocol.n_test: -1 must be >= 1"),
        ("protocol.eval_every", 3, "protocol.eval_every: 3 must be a multiple of protocol.sleep_every"),
        ("benchmarks.babyai.options", {"grid": 9}, "config key benchmarks.babyai: babyai: unknown option(s) ['grid']; known: prompt, current_observation"),
        ("benchmarks.babyai.options", {"prompt": "fancy"}, "config key benchmarks.babyai: babyai: unknown prompt 'fancy'"),
        ("benchmarks.babyai.history_window", 0, "config key benchmarks.babyai.history_window: 0 must be >= 1"),
        ("llm.reasoning_effort", {"actor": "extreme"}, "config key llm.reasoning_effort.actor: 'extreme' is not allowed"),
    ],
)
def test_bad_values_name_the_key(path, value, expected):
    with pytest.raises(ConfigError) as err:
        check_config(with_change(path, value))
    assert expected in str(err.value)


def openai_run() -> dict:
    """config.yaml on a served API: one model for both roles (config.yaml's inducer.model is a shipped file)."""
    cfg = with_change("llm", {"backend": "openai", "model": "gpt-x", "base_url": "http://localhost:1/v1",
                              "api_key_env": "SKILLREPRO_TEST_KEY"})
    cfg["inducer"]["model"] = None
    return cfg


def test_openai_backend_needs_key_and_price(monkeypatch):
    cfg = openai_run()
    monkeypatch.delenv("SKILLREPRO_TEST_KEY", raising=False)
    with pytest.raises(ConfigError, match="environment variable SKILLREPRO_TEST_KEY is not set"):
        check_config(cfg)
    monkeypatch.setenv("SKILLREPRO_TEST_KEY", "k")
    with pytest.raises(ConfigError, match="no price for model 'gpt-x'"):
        check_config(cfg)
    cfg["pricing"] = {"gpt-x": {"input": 0.0, "cached_input": 0.0, "output": 0.0}}  # a preset's placeholder
    with pytest.raises(ConfigError, match="pricing.gpt-x: every rate is 0"):
        check_config(cfg)
    cfg["pricing"] = {"gpt-x": {"input": 0.75, "cached_input": 0.075, "output": 4.5}}
    check_config(cfg)


def test_a_plan_needs_no_key_and_no_prices(monkeypatch):
    """`snakemake -n` checks with billing=False and lists what a real run needs; on_start refuses on it."""
    cfg = openai_run()
    cfg["pricing"] = {"gpt-x": {"input": 0.0, "cached_input": 0.0, "output": 0.0}}
    monkeypatch.delenv("SKILLREPRO_TEST_KEY", raising=False)
    checked = check_config(cfg, billing=False)
    assert billing_problems(checked) == [
        "config key llm.api_key_env: environment variable SKILLREPRO_TEST_KEY is not set",
        "config key pricing.gpt-x: every rate is 0 for a billed model; put your provider's dollars per million "
        "tokens there"]
    with pytest.raises(ConfigError, match="SKILLREPRO_TEST_KEY is not set"):
        check_billing(checked)
    assert billing_problems(check_config(BASE, billing=False)) == []  # the embedded model bills nothing
    # the sleep phases' own model (inducer.model) is billed too
    cfg["inducer"] = {"model": "gpt-y"}
    assert "config key pricing: no price for model 'gpt-y' (backend openai is billed)" in billing_problems(
        check_config(cfg, billing=False))


def test_defaults_are_filled_and_checkpoints_follow_the_protocol():
    cfg = check_config({**BASE, "protocol": {"seeds": [0, 1, 2], "train_rollouts": 200, "sleep_every": 10,
                                             "eval_every": 50, "n_test": 30}})
    p = protocol(cfg)
    assert p.task_seed == 42
    assert cfg["llm"]["api_key_env"] == "OPENAI_API_KEY"
    assert p.n_cycles == 20
    assert p.checkpoints == [0, 5, 10, 15, 20]


def test_the_episode_wall_clock_default_is_written_once():
    """budgets.rollout_wall_s's default is config.ROLLOUT_WALL_S: the schema's, the rules' and the functions'."""
    schema = load_yaml(SCHEMA)
    default = schema["properties"]["budgets"]["properties"]["rollout_wall_s"]["default"]
    assert default == ROLLOUT_WALL_S and type(default) is type(ROLLOUT_WALL_S)
    cfg = copy.deepcopy(BASE)
    cfg["budgets"].pop("rollout_wall_s", None)
    assert check_config(cfg)["budgets"]["rollout_wall_s"] == ROLLOUT_WALL_S


def test_method_options_are_checked_by_the_methods_options_class():
    cfg = with_change("methods.react", {"method": "speedrunner", "options": {"interpreter": "off"}})
    with pytest.raises(ConfigError, match=r"config key methods.react.options.interpreter: 'off' is not a bool"):
        check_config(cfg)
    cfg = with_change("methods.react", {"method": "speedrunner", "options": {"prompt": "verbose"}})
    with pytest.raises(ConfigError, match=r"methods.react.options.prompt: 'verbose' is not one of 'default', 'asi_style'"):
        check_config(cfg)
    cfg = with_change("methods.react", {"method": "speedrunner", "options": {"interpreter": False, "access": "all_public"}})
    assert check_config(cfg)["methods"]["react"]["options"] == {"interpreter": False, "access": "all_public"}


@pytest.mark.parametrize("name", ["../../x", "a/b", "re act", "réact", "a.b", "x|y", "(x)", "", "react\n", "9lives",
                                  "x" * 65])
@pytest.mark.parametrize("section", ["benchmarks", "methods"])
def test_names_that_become_paths_must_be_safe(section, name):
    cfg = copy.deepcopy(BASE)
    cfg[section][name] = cfg[section].pop(next(iter(cfg[section])))
    with pytest.raises(ConfigError, match=f"config key {section}: .* is not a valid name"):
        check_config(cfg)


@pytest.mark.parametrize("path, value, expected", [
    ("protocol.train_rollouts", 10**9, "config key protocol.train_rollouts: 1000000000 must be <= 100000"),
    ("protocol.seeds", list(range(101)), "config key protocol.seeds: more than 100 entries"),
    ("protocol.seeds", [0, 0], "config key protocol.seeds: [0, 0] repeats a seed"),
    ("protocol.n_test", 31, "config key protocol.n_test: 31 test tasks asked for, but benchmark babyai (babyai) has 30"),
    ("protocol.train_rollouts", 202, "config key protocol.train_rollouts: 202 train tasks asked for"),
    ("budgets.inducer_requests", 10**7, "config key budgets.inducer_requests: 10000000 must be <= 100000"),
    ("llm.temperature", float("nan"), "config key llm.temperature: nan is not a finite number"),
    ("budgets.rollout_wall_s", float("inf"), "config key budgets.rollout_wall_s: inf is not a finite number"),
    ("methods.react.benchmarks", ["../x"], "config key methods.react.benchmarks.0: '../x' is not a valid name"),
])
def test_values_that_size_the_work_are_bounded(path, value, expected):
    with pytest.raises(ConfigError) as err:
        check_config(with_change(path, value))
    assert expected in str(err.value)


def test_too_many_sleep_cycles_are_refused():
    cfg = with_change("protocol", dict(BASE["protocol"], train_rollouts=100000, sleep_every=1, eval_every=1))
    cfg["benchmarks"] = {"crafter": {"env": "crafter"}}
    with pytest.raises(ConfigError, match="100000 sleep cycles per run; at most 1000"):
        check_config(cfg)


def test_the_loops_own_rules_hold_only_where_runs_are_configured():
    """SpeedRunner's rules beyond its schema are its settings builder's (studies/speedrunner/settings.py), not the
    shared config.validate's: the check refuses a protocol whose checkpoints miss its batches where methods are
    configured, and a config without runs (another study's) is not held to them."""
    cfg = with_change("protocol.eval_every", 3)
    validate(copy.deepcopy(cfg))  # the shared floor knows nothing of sleep batches
    with pytest.raises(ConfigError, match=r"^config key protocol.eval_every: 3 must be a multiple"):
        check_config(cfg)
    cfg["methods"] = {}
    assert speedrunner_settings(check_config(cfg)).protocol.eval_every == 3


def test_an_alias_bomb_stops_before_anything_walks_it(tmp_path):
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    cfg = copy.deepcopy(BASE)
    cfg["methods"]["react"]["options"] = load_yaml(bomb)  # 10**9 values once expanded
    with pytest.raises(ConfigError, match="more than 100000 values once YAML aliases are expanded"):
        check_config(cfg)


def test_a_gguf_path_must_be_a_gguf_file(tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"<html>404 not found</html>")
    with pytest.raises(ConfigError, match=r"config key llm.model: .*model.gguf is not a GGUF file"):
        check_config(with_change("llm.model", str(fake)))
    fake.write_bytes(b"GGUF\x03\x00\x00\x00")
    check_config(with_change("llm.model", str(fake)))


def test_settings_fingerprint_ignores_key_order_and_defaults_written_out():
    from skillrepro.studies.speedrunner.settings import loop_fingerprint

    cfg = check_config(BASE)
    reordered = check_config({k: dict(reversed(list(v.items()))) if isinstance(v, dict) else v
                              for k, v in reversed(list(BASE.items()))})
    reads = ("llm", "benchmark", "call_budget", "method", "protocol.n_test")
    fp = loop_fingerprint(cfg, reads, bench="babyai", variant="react")
    assert fp == loop_fingerprint(reordered, reads, bench="babyai", variant="react")
    assert fp == loop_fingerprint(check_config(with_change("llm.threads", 16)), reads, bench="babyai", variant="react")
    assert fp != loop_fingerprint(check_config(with_change("llm.temperature", 0.1)), reads, bench="babyai", variant="react")
    assert len(fp) == 16


def test_a_prompt_file_edited_in_place_changes_the_fingerprint(tmp_path):
    """Replacing a method's prompt file keeps its path; the jobs that read it must still rerun."""
    from skillrepro.studies.speedrunner.settings import loop_fingerprint

    prompt = tmp_path / "inducer.txt"
    prompt.write_text("Write skills.")
    cfg = check_config({**BASE, "methods": {"sr": {"method": "speedrunner", "options": {"inducer_prompt_file": str(prompt)}}}})
    before = loop_fingerprint(cfg, ("method",), bench="babyai", variant="sr")
    assert before == loop_fingerprint(cfg, ("method",), bench="babyai", variant="sr")
    prompt.write_text("Write better skills.")
    assert before != loop_fingerprint(cfg, ("method",), bench="babyai", variant="sr")
    # an option naming several files: an edit to any of them
    one, two = tmp_path / "one.py", tmp_path / "two.py"
    one.write_text("def a():\n    return 1\n")
    two.write_text("def b():\n    return 2\n")
    cfg = check_config({**BASE, "methods": {"sr": {"method": "speedrunner", "options": {"example_file": [str(one), str(two)]}}}})
    before = loop_fingerprint(cfg, ("method",), bench="babyai", variant="sr")
    two.write_text("def b():\n    return 3\n")
    assert before != loop_fingerprint(cfg, ("method",), bench="babyai", variant="sr")


def test_actor_prompt_files_are_checked_before_any_work(tmp_path):
    """Every actor prompt is a file a user can replace (config section actor.prompts); a missing file, a
    broken placeholder or a reminder that would never be shown is refused by its key."""
    from scripted import methods_config
    from skillrepro.check import check_config

    def with_actor(actor):
        return {**methods_config(react={"method": "react"}), "actor": actor}

    with pytest.raises(ConfigError, match=r"config key actor\.prompts\.system: file .*nope\.txt does not exist"):
        check_config(with_actor({"prompts": {"system": str(tmp_path / "nope.txt")}}))
    bad = tmp_path / "system.txt"
    bad.write_text("{environment}\n{tools}\n{protocol} {unknown}")
    with pytest.raises(ConfigError, match=r"config key actor\.prompts\.system: KeyError 'unknown'"):
        check_config(with_actor({"prompts": {"system": str(bad)}}))
    reminder = tmp_path / "reminder.txt"
    reminder.write_text("Skills: {skills}")
    with pytest.raises(ConfigError, match=r"actor\.prompts\.skill_reminder: .*restate_skills is false"):
        check_config(with_actor({"prompts": {"skill_reminder": str(reminder)}}))
    checked = check_config(with_actor({"restate_skills": True, "prompts": {"skill_reminder": str(reminder)}}))
    assert checked["actor"]["prompts"]["system"] is None  # the schema's defaults filled in


def test_study_sections_are_checked_with_the_main_configs_errors():
    """Each study's settings builder validates its sections against its own schema (config.validate_sections): a
    ConfigError naming <section>.<key>, and the schema's defaults filled in, for a section left out too."""
    with pytest.raises(ConfigError, match=r"config key kvcache.vllm_version: '9.9.9' is not allowed"):
        validate_section({"kvcache": {"vllm_version": "9.9.9"}}, "kvcache")
    assert validate_section({}, "kvcache")["vllm_version"] == "0.11.0"
    with pytest.raises(ConfigError, match=r"^config key inducer.library_chars: 5 must be >= 100$"):
        validate_sections({"inducer": {"library_chars": 5}}, "speedrunner.schema.yaml")
    own = validate_sections({"inducer": {"library_chars": 500}}, "speedrunner.schema.yaml")
    assert own["inducer"]["library_chars"] == 500 and own["inducer"]["history_tokens"] is None
    assert own["methods"] == {} and own["protocol"]["train_rollouts"] == 0  # no runs: the empty protocol


def test_a_config_of_another_study_needs_no_speedrunner_section():
    """The loop's sections (methods, protocol, inducer, analysis) are its own schema's: the KV-cache and
    SkillScaffold presets set none, check as they are, and leave the loop unconfigured; methods without a
    protocol are refused by the loop's settings, naming the key."""
    for name in ("kvcache.yaml", "scaffold.yaml"):
        preset = load_yaml(ROOT / "configs" / name)
        assert not {"methods", "protocol", "inducer", "analysis"} & set(preset), name
        checked = check_config(preset, check_files=False)
        assert [s.name for s in configured(checked)] == [name.removesuffix(".yaml")]
        assert speedrunner_settings(checked).methods == {}
    runs = {k: v for k, v in BASE.items() if k != "protocol"}
    with pytest.raises(ConfigError, match=r"^config key protocol: methods are configured, so the protocol"):
        check_config(runs)


def test_the_laptop_learning_preset_is_the_default_run_over_three_seeds():
    preset = load_yaml(ROOT / "configs" / "laptop-learning.yaml")
    assert preset["protocol"].pop("seeds") == [0, 1, 2]
    default = dict(BASE, protocol={k: v for k, v in BASE["protocol"].items() if k != "seeds"})
    assert preset == default


def test_a_cap_with_its_reasoning_room_must_leave_a_prompt_room():
    """Each role's completion cap, its reasoning room included, is checked against the context before any work;
    the embedded server sends no effort, so it adds no room."""
    paper = load_yaml(ROOT / "configs/paper.yaml")
    paper["llm"]["ctx_per_slot"] = 9000  # the inducer asks 1,024 + 8,192 (medium)
    with pytest.raises(ConfigError, match=r"llm.reasoning_room: the inducer's requests ask for 9216 completion tokens "
                                          r"\(1024 of reply, 8192 of reasoning room for effort medium\)"):
        check_config(paper, check_files=False, billing=False)
    paper["llm"]["reasoning_effort"] = {"actor": "low", "inducer": "low"}
    check_config(paper, check_files=False, billing=False)  # 1,024 + 2,048 fits
    paper["llm"]["reasoning_effort"] = {"actor": "low", "inducer": "low", "critic": "high"}  # a role named alone
    with pytest.raises(ConfigError, match="the critic's requests ask for 17408"):
        check_config(paper, check_files=False, billing=False)
    small = copy.deepcopy(BASE)
    small["llm"]["reasoning_room"] = {"medium": 100000}
    check_config(small, check_files=False)  # embedded: no effort is sent, so no room is added


def test_every_preset_of_a_reasoning_model_gives_its_roles_the_papers_room():
    """The presets of API reasoning models (the paper's and the cross-model ones) send A.1's efforts with
    configs/paper.yaml's room, so a thinking model's cap is not spent before it answers."""
    paper = load_yaml(ROOT / "configs/paper.yaml")["llm"]
    presets = ["paper.yaml", *(p.name for p in sorted((ROOT / "configs").glob("cross-model-*.yaml")))]
    assert len(presets) == 4
    for name in presets:
        llm = load_yaml(ROOT / "configs" / name)["llm"]
        assert llm["reasoning_room"] == paper["reasoning_room"], name
        assert llm.get("reasoning_effort", {"actor": "low", "inducer": "medium"}) == paper["reasoning_effort"], name


def test_a_vllm_server_the_run_starts_for_native_tool_calls_has_the_tool_flags():
    cfg = load_yaml(ROOT / "configs/paper.yaml")
    cfg["llm"].update(load_yaml(ROOT / "configs/paper-vllm.yaml")["llm"])
    check_config(cfg, check_files=False, billing=False)  # the preset's own flags pass
    cfg["llm"]["vllm_args"] = ["--enable-auto-tool-choice"]
    with pytest.raises(ConfigError, match="llm.vllm_args: .*--tool-call-parser"):
        check_config(cfg, check_files=False, billing=False)
    cfg["llm"]["base_url"] = "http://gpu-node:8000/v1"  # a server someone else started: its flags are theirs
    check_config(cfg, check_files=False, billing=False)


def test_a_benchmark_whose_extra_is_not_installed_is_named_with_the_install(monkeypatch):
    """`pip install -e .` alone has BabyAI's package only: a preset with Crafter stops with the extra to install,
    not a traceback."""
    from skillrepro.benchmarks.crafter import CrafterBenchmark

    monkeypatch.setattr(CrafterBenchmark, "requires", ("crafter_not_installed",))  # as if the extra were missing
    cfg = copy.deepcopy(BASE)
    cfg["benchmarks"]["crafter"] = {"env": "crafter"}
    with pytest.raises(ConfigError, match=r"benchmarks.crafter: benchmark env 'crafter' needs the package\(s\) crafter_not_installed.*"
                                          r"pip install -e '\.\[benchmarks\]'"):
        check_config(cfg, check_files=False, billing=False)


def test_a_start_library_is_checked_before_any_work_and_its_contents_rerun_the_run(tmp_path):
    from skillrepro.studies.speedrunner.settings import loop_fingerprint

    def cfg(variant: dict) -> dict:
        return {**BASE, "methods": {"v": variant}}

    with pytest.raises(ConfigError, match=r"methods\.v\.start_library: .*missing is not a folder"):
        check_config(cfg({"method": "asi", "start_library": str(tmp_path / "missing")}))
    (tmp_path / "skills.py").write_text("def _helper():\n    return 1\n")
    with pytest.raises(ConfigError, match=r"methods\.v\.start_library: .*no public function"):
        check_config(cfg({"method": "asi", "start_library": str(tmp_path)}))
    (tmp_path / "skills.py").write_text("def go_to_door():\n    return 1\n")
    with pytest.raises(ConfigError, match=r"methods\.v\.start_library: the reference method's library is its "
                                          r"options\.library"):
        check_config(cfg({"method": "reference", "start_library": str(tmp_path)}))
    checked = check_config(cfg({"method": "asi", "start_library": str(tmp_path)}))
    before = loop_fingerprint(checked, ("method",), bench="babyai", variant="v")
    assert before != loop_fingerprint(check_config(cfg({"method": "asi"})), ("method",), bench="babyai", variant="v")
    (tmp_path / "notes.md").write_text("Open doors first.")
    assert before != loop_fingerprint(checked, ("method",), bench="babyai", variant="v")
