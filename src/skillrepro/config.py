"""Configuration: schema validation with one clear message per problem, and typed views of the sections.

Long because it types every shared section and names each bad key; each section's reader is short.

`check_config` is what the Snakefile calls before any job is scheduled; the scripts call the `*_config`
constructors to get typed dataclasses instead of passing dicts around.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMAS = Path(__file__).resolve().parent / "schemas"  # package data: the shared sections' and each study's
SCHEMA = SCHEMAS / "config.schema.yaml"
# One episode's wall clock, in seconds: budgets.rollout_wall_s's default (the schema's, under test) and every
# function's default for it. An int as the schema writes it; the functions take float(ROLLOUT_WALL_S).
ROLLOUT_WALL_S = 1800



class ConfigError(ValueError):
    """Bad configuration; the message names the key and what is allowed."""


# The paper gives reasoning efforts for its actor and inducer only (A.1); every other role takes the effort of
# the one it stands in for, unless llm.reasoning_effort names it: a baseline's learner is its inducer.
EFFORT_FROM = {"replay": "actor", "optimizer": "inducer", "curriculum": "inducer", "critic": "inducer",
               "skill_writer": "inducer"}


@dataclass(frozen=True)
class LLMConfig:
    backend: str = "embedded"
    model: str = "qwen2.5-coder-0.5b"
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.7
    top_p: float | None = None  # None: the server's default (1.0)
    max_tokens: int = 96
    max_tokens_param: str = "max_tokens"  # the request field for it, per model (max_completion_tokens)
    send_temperature: bool = True  # False where the API rejects a temperature
    seed: int = 0
    slots: int = 2
    ctx_per_slot: int = 8192
    threads: int = 2
    max_retries: int = 5
    timeout_s: float = 600
    tool_calling: str = "text"
    max_tools: int | None = None  # tools one request may list; None: the backend's documented limit (llm/limits.py)
    vllm_args: tuple[str, ...] = ()
    episodes_in_flight: int = 1  # episodes of one batch played at once (each job takes as many `llm` units)
    # role -> reasoning_effort (A.1); sent only where the backend accepts it (see LLMClient.chat)
    reasoning_effort: tuple[tuple[str, str], ...] = (("actor", "low"), ("inducer", "medium"))
    # effort -> completion tokens added to a request's cap where that effort is sent (reasoning counts in the cap)
    reasoning_room: tuple[tuple[str, int], ...] = ()
    cap_retry_factor: int = 4  # a reply empty at its cap is asked again once with this many times the cap; 1: not

    def effort(self, role: str) -> str | None:
        """The reasoning_effort sent with `role`'s requests: its own entry in llm.reasoning_effort, else that of
        the A.1 role it stands in for (EFFORT_FROM); None for the embedded server (llama.cpp ignores it)."""
        if self.backend == "embedded":
            return None
        efforts = dict(self.reasoning_effort)
        return efforts.get(role) or efforts.get(EFFORT_FROM.get(role, ""))

    def reply_cap(self, role: str, tokens: int) -> int:
        """A request's completion cap: `tokens` of answer, plus llm.reasoning_room for the effort it sends."""
        effort = self.effort(role)
        return tokens + (dict(self.reasoning_room).get(effort, 0) if effort else 0)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LLMConfig":
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        if "vllm_args" in d:
            d["vllm_args"] = tuple(d["vllm_args"])
        for key in ("reasoning_effort", "reasoning_room"):
            if key in d:
                d[key] = tuple(sorted((d[key] or {}).items()))
        return cls(**d)


@dataclass(frozen=True)
class ActorConfig:
    """Config section `actor`: what the actor is shown, the same for every method."""

    restate_skills: bool = False  # the skill reminder after every observation (a deviation for small models)
    prompt_files: tuple[tuple[str, str], ...] = ()  # (prompt name, file) replacing a shipped actor prompt
    stop: tuple[str, ...] | None = None  # the reply's stop sequences; None: the protocol's own
    extra_arguments: str = "refuse"  # a call with more arguments than its action takes: refuse | drop the extras


@dataclass(frozen=True)
class Price:
    input: float
    output: float
    cached_input: float | None = None

    def cost(self, prompt: int, cached: int | None, completion: int) -> float:
        """Dollars for one call; `cached` None (the server did not report it) is priced as 0 cached: the
        full input price, explicitly (analysis._COST does the same in SQL)."""
        cached = 0 if cached is None else cached
        cached_rate = self.input if self.cached_input is None else self.cached_input
        return ((prompt - cached) * self.input + cached * cached_rate + completion * self.output) / 1e6


@dataclass(frozen=True)
class MethodConfig:
    variant: str
    method: str  # a name registered in skillrepro.methods
    options: dict[str, Any] = field(default_factory=dict)  # raw; the method's options class checks them
    benchmarks: tuple[str, ...] | None = None  # None: every configured benchmark
    start_library: str | None = None  # a library folder its runs start from (Library.from_folder); None: the method's v0

    def runs_on(self, benchmark: str) -> bool:
        return self.benchmarks is None or benchmark in self.benchmarks


@dataclass(frozen=True)
class BenchmarkConfig:
    name: str
    env: str
    llm_call_budget: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    history_window: int | None = None  # None: the full history (the paper); N: the actor's last N steps
    after: str | None = None  # a phase change: runs start from the final library of this instance's run
    evaluate_on: tuple[str, ...] = ()  # other instances whose test sets every checkpoint also plays

    @property
    def eval_targets(self) -> tuple[str, ...]:
        """Extra test sets of every checkpoint: `evaluate_on`, and the earlier phase (for retention)."""
        return tuple(dict.fromkeys([*self.evaluate_on, *([self.after] if self.after else [])]))



def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    with open(path) as f:
        return yaml.safe_load(f) or {}


def _describe(error: jsonschema.ValidationError) -> str:
    key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
    v = error.validator
    if v == "enum":
        return f"config key {key}: {error.instance!r} is not allowed; allowed values: {', '.join(map(str, error.validator_value))}"
    if v == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return f"config key {key}: unknown key(s) {', '.join(extra)}; allowed keys: {', '.join(allowed)}"
    if v in ("minimum", "exclusiveMinimum"):
        return f"config key {key}: {error.instance!r} must be {'>=' if v == 'minimum' else '>'} {error.validator_value}"
    if v in ("maximum", "exclusiveMaximum"):
        return f"config key {key}: {error.instance!r} must be {'<=' if v == 'maximum' else '<'} {error.validator_value} (it sizes the work)"
    if v in ("maxItems", "maxProperties"):
        return f"config key {key}: more than {error.validator_value} entries (it sizes the work)"
    if v == "pattern":
        # A name becomes a folder and a wildcard value: nothing that could leave results/ or confuse a regex.
        return (f"config key {key}: {error.instance!r} is not a valid name: use 1-64 ASCII letters, digits, "
                f"'_' or '-', starting with a letter")
    if v == "type":
        return f"config key {key}: {error.instance!r} has the wrong type; expected {error.validator_value}"
    if v == "required":
        return f"config key {key}: {error.message}"
    return f"config key {key}: {error.message}"


# YAML aliases can make a small file expand into billions of values when it is walked (an "anchor bomb");
# a config walks far fewer than this.
MAX_CONFIG_VALUES = 100_000
GGUF_MAGIC = b"GGUF"


def _check_values(config: Any) -> None:
    """Refuse NaN, infinities and alias bombs before anything walks the config (the schema validator would)."""
    seen = 0
    stack: list[tuple[str, Any]] = [("", config)]
    while stack:
        where, value = stack.pop()
        seen += 1
        if seen > MAX_CONFIG_VALUES:
            raise ConfigError(f"config has more than {MAX_CONFIG_VALUES} values once YAML aliases are expanded "
                              f"(an alias bomb?); last seen under {where or '(top level)'}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"config key {where}: {value!r} is not a finite number")
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{where}.{i}", v) for i, v in enumerate(value))


@functools.cache
def _schema(path: Path) -> dict[str, Any]:
    """A schema file, parsed once per process (PyYAML parses the five in ~40 ms, and every job's start reads them);
    the caller copies it before changing it."""
    return yaml.safe_load(path.read_text())


def study_schemas() -> dict[str, Path]:
    """The top-level sections that studies own, each with the schema file that checks it: a study's own file in
    the package, schemas/<study>.schema.yaml, whose `properties` are the sections it owns (`validate_sections`)."""
    return {section: path for path in sorted(SCHEMAS.glob("*.schema.yaml")) if path != SCHEMA
            for section in _schema(path)["properties"]}


def validate(config: dict[str, Any], *, check_files: bool = True) -> dict[str, Any]:
    """Validate `config`'s shared sections against the main schema and the rules a schema can not say that need no
    registry; return it with the schema's defaults. A study's sections are only required to be mappings here: each
    study checks its own against its schema (`validate_sections`) when its settings are built, and
    skillrepro.check.check_config adds the checks against the registries (methods, benchmarks, models) and builds
    every configured study's settings. Raises ConfigError with one message naming the key; nothing is started."""
    _check_values(config)
    config = copy.deepcopy(config)
    schema = copy.deepcopy(_schema(SCHEMA))
    own = study_schemas()
    schema["properties"].update({s: {"type": "object", "description": f"checked by {path.name}"}
                                 for s, path in own.items()})
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        raise ConfigError(_describe(errors[0]))
    # Defaults come from the schema, through snakemake's own validator, so there is one list of them.
    # lazy: start-up cost: snakemake.utils adds ~10 % to `import skillrepro.check`, 80-130 ms to this module's own
    from snakemake.utils import validate

    shared = {k: v for k, v in config.items() if k not in own}
    validate(shared, str(SCHEMA), set_default=True)
    config = {**shared, **{k: config[k] for k in own if k in config}}

    llm = LLMConfig.from_dict(config["llm"])
    _check_llm(llm, check_files)
    # a reasoning model's cap holds its reasoning too: the actor's cap, room included, must leave a prompt room (a
    # study checks its own roles' caps: SpeedRunner's sleep phases in studies/speedrunner/settings.py)
    check_reply_cap(llm, "actor", llm.max_tokens)
    for name, path in actor_config(config).prompt_files:
        if check_files and not Path(path).is_file():
            raise ConfigError(f"config key actor.prompts.{name}: file {path} does not exist")
    return config


def validate_sections(config: dict[str, Any], schema: str) -> dict[str, Any]:
    """The sections a study's schema file `schema` (under schemas/ in the package) owns, checked against it with
    the main schema's messages (a ConfigError naming `<section>.<key>`) and returned as a copy with the schema's
    defaults: a section the config leaves out is its default (SpeedRunner's `protocol` without runs, `{}` with its
    keys' defaults for the others)."""
    path = SCHEMAS / schema
    given = {k: config[k] for k in _schema(path)["properties"] if k in config}
    errors = sorted(_validator(path).iter_errors(given), key=lambda e: list(e.absolute_path))
    if errors:
        raise ConfigError(_describe(errors[0]))
    # default=str: a value of no JSON type can only sit where the schema takes anything (a method's options)
    return json.loads(_with_defaults(path, json.dumps(given, sort_keys=True, default=str)))


@functools.cache
def _validator(path: Path) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(_schema(path))


@functools.lru_cache(maxsize=64)
def _with_defaults(path: Path, given: str) -> str:
    """The checked sections `given` (JSON) with the schema's defaults (JSON), once per process for each value: a
    job's start-up and each rule's settings ask it again and again of the same config."""
    value = json.loads(given)
    # Defaults come from the schema through snakemake's own validator, as in validate().
    # lazy: start-up cost, as in validate()
    from snakemake.utils import validate

    validate(value, str(path), set_default=True)
    return json.dumps(value)


def validate_section(config: dict[str, Any], section: str) -> dict[str, Any]:
    """One study section (`validate_sections`), checked against the schema file that owns it."""
    return validate_sections(config, study_schemas()[section].name)[section]


def _check_llm(llm: LLMConfig, check_files: bool) -> None:
    # A name from the shipped models is checked by skillrepro.check; here, a .gguf path.
    if llm.backend == "embedded" and llm.model.endswith(".gguf"):
        if check_files and not Path(llm.model).is_file():
            raise ConfigError(f"config key llm.model: model file {llm.model} does not exist")
        if check_files:
            with open(llm.model, "rb") as f:
                magic = f.read(4)
            if magic != GGUF_MAGIC:
                raise ConfigError(f"config key llm.model: {llm.model} is not a GGUF file (it starts with "
                                  f"{magic!r}, not {GGUF_MAGIC!r})")
    if llm.backend == "openai" and not llm.base_url:
        raise ConfigError("config key llm.base_url: required for backend openai")


def check_reply_cap(llm: LLMConfig, role: str, tokens: int) -> None:
    """A ConfigError when `role`'s completion cap, `tokens` of reply and the reasoning room of the effort it sends,
    leaves no room for a prompt in llm.ctx_per_slot."""
    if (cap := llm.reply_cap(role, tokens)) >= llm.ctx_per_slot:
        raise ConfigError(f"config key llm.reasoning_room: the {role}'s requests ask for {cap} completion tokens "
                          f"({tokens} of reply, {cap - tokens} of reasoning room for effort {llm.effort(role)}), "
                          f"which leave no room for a prompt in llm.ctx_per_slot {llm.ctx_per_slot}")


def prices(config: dict[str, Any]) -> dict[str, Price]:
    """Config section `pricing`: model -> its Price (a model it does not name costs nothing)."""
    return {m: Price(r["input"], r["output"], r.get("cached_input")) for m, r in (config.get("pricing") or {}).items()}


def llm_config(config: dict[str, Any]) -> LLMConfig:
    return LLMConfig.from_dict(config["llm"])


def seeded(llm: LLMConfig, seed: int) -> LLMConfig:
    """The run's sampling seed: each training seed samples differently, reproducibly."""
    return dataclasses.replace(llm, seed=llm.seed + 1000 * int(seed))


def actor_config(config: dict[str, Any]) -> ActorConfig:
    a = config["actor"]
    return ActorConfig(a["restate_skills"], tuple(sorted((k, v) for k, v in a["prompts"].items() if v)),
                       None if a["stop"] is None else tuple(a["stop"]), a["extra_arguments"])


def benchmarks(config: dict[str, Any]) -> list[BenchmarkConfig]:
    return [benchmark(config, k) for k in config["benchmarks"]]


def sandbox_require(config: dict[str, Any]) -> tuple[str, ...]:
    """Isolation layers the skill sandbox must have, or the run refuses to start (config key sandbox.require)."""
    return tuple((config.get("sandbox") or {}).get("require") or ())


# Settings that change how a job runs, not what it produces: raising threads on a bigger machine, or the
# retry and timeout limits, must not redo finished work.
OPERATIONAL_LLM_KEYS = frozenset({"slots", "threads", "max_retries", "timeout_s", "api_key_env", "episodes_in_flight",
                                  "response_cache", "max_dollars"})


def fingerprint(value: Any) -> str:
    """A short digest of `value` that ignores key order (sha256 of canonical JSON)."""
    text = json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), allow_nan=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes ("missing" for none: the job that reads it names the error)."""
    p = Path(path)
    return hashlib.sha256(p.read_bytes()).hexdigest()[:16] if p.is_file() else "missing"


def _canonical(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # `temperature: 1` and `temperature: 1.0` are one setting
    return value


def benchmark(config: dict[str, Any], name: str) -> BenchmarkConfig:
    v = config["benchmarks"][name]
    return BenchmarkConfig(name=name, **(v | {"evaluate_on": tuple(v.get("evaluate_on") or ())}))
