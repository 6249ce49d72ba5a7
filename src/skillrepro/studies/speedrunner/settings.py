"""SpeedRunner's online wake/sleep loop as a study of the workflow: its typed settings and the config rules they
hold to, a job's and a run's settings, the fingerprint of what each kind of its jobs reads, and its contract object
(`SPEEDRUNNER`, listed in skillrepro.check.STUDIES)."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillrepro.agent import Prompts
from skillrepro.benchmarks import load_benchmark
from skillrepro.config import (ActorConfig, BenchmarkConfig, ConfigError, LLMConfig, MethodConfig, Price,
                               actor_config, benchmarks, check_reply_cap, file_digest, fingerprint, llm_config, prices,
                               sandbox_require, seeded, validate_sections)
from skillrepro.methods import InducerLimits, Variant, bind, check_benchmarks, get_method, registry
from skillrepro.skills import Library
from skillrepro.skills.isolation import SandboxPolicy
from skillrepro.skills.sandbox import probe
from skillrepro.studies.contract import SettingsError, Study, config_part
from skillrepro.studies.speedrunner.paths import Run, run_id

# Training cycles per run: each rollout job lists every earlier batch, so the DAG grows with its square.
MAX_CYCLES = 1000


@dataclass(frozen=True)
class Protocol:
    """Config section `protocol`: a run's rollouts, sleep cycles, checkpoints and task draws."""

    seeds: tuple[int, ...]
    train_rollouts: int
    sleep_every: int
    eval_every: int
    n_test: int
    task_seed: int = 42

    @property
    def n_cycles(self) -> int:
        return self.train_rollouts // self.sleep_every

    @property
    def checkpoints(self) -> list[int]:
        """Library versions evaluated on the test set: v0 and every `eval_every` rollouts."""
        step = self.eval_every // self.sleep_every
        return sorted({0, *range(step, self.n_cycles + 1, step)})


@dataclass(frozen=True)
class SpeedRunnerSettings:
    """The online wake/sleep loop's typed settings (its rules' module-level values, rules/common.smk)."""

    llm: LLMConfig
    inducer: InducerLimits
    protocol: Protocol
    benchmarks: dict[str, BenchmarkConfig]  # name -> instance
    methods: dict[str, MethodConfig]  # variant -> method
    actor: ActorConfig
    sandbox_require: tuple[str, ...]  # config key sandbox.require: layers every sandbox of a run must have
    prices: dict[str, Price]  # config section pricing: model -> its price (the tables' and views' dollars)
    analysis: dict[str, Any]  # config section analysis, with its defaults: the tables', figures' and pages' extras


SCHEMA = "speedrunner.schema.yaml"  # its sections: methods, protocol, inducer, analysis


def own(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with the loop's sections checked against its schema and their defaults filled (a ConfigError
    naming the key); a config without runs (the KV-cache study's or SkillScaffold's) gets the protocol's empty
    default."""
    if config.get("methods") and "protocol" not in config:
        raise ConfigError("config key protocol: methods are configured, so the protocol of their runs is needed "
                          "(train_rollouts, sleep_every, eval_every, n_test, seeds)")
    return {**config, **validate_sections(config, SCHEMA)}


def speedrunner_settings(config: dict[str, Any]) -> SpeedRunnerSettings:
    """The loop's typed settings: its sections checked against its schema (`own`); where the config configures
    runs (a `methods` section), `check_loop` adds the rules a schema can not say, a ConfigError naming the key."""
    config = own(config)
    llm, limits, proto = llm_config(config), inducer_limits(config), protocol(config)
    if config["methods"]:
        check_loop(config, llm, limits, proto)
    return SpeedRunnerSettings(llm, limits, proto, {b.name: b for b in benchmarks(config)},
                               {m.variant: m for m in methods(config)}, actor_config(config), sandbox_require(config),
                               prices(config), config["analysis"])


def protocol(config: dict[str, Any]) -> Protocol:
    """Config section `protocol`, a run's rollouts and task draws."""
    p = dict(own(config)["protocol"])
    p["seeds"] = tuple(p["seeds"])
    return Protocol(**p)


def inducer_limits(config: dict[str, Any]) -> InducerLimits:
    """Config section `inducer`, the sleep phases' limits."""
    return InducerLimits(**own(config)["inducer"])


def methods(config: dict[str, Any]) -> list[MethodConfig]:
    """Config section `methods`: each variant, its method and options as given (its method's options class
    parses them)."""
    return [MethodConfig(variant=k, method=v["method"], options=dict(v.get("options") or {}),
                         benchmarks=tuple(v["benchmarks"]) if v.get("benchmarks") is not None else None,
                         start_library=v.get("start_library"))
            for k, v in own(config)["methods"].items()]


def sleep_models(config: dict[str, Any]) -> dict[str, str]:
    """SPEEDRUNNER.models: the sleep phases' own model (inducer.model), where it names one."""
    model = inducer_limits(config).model
    return {"inducer.model": model} if model else {}


def trajectory_tokens(config: dict[str, Any]) -> int:
    """Config key budgets.trajectory_tokens, with its default resolved: null is what the model's context
    (llm.ctx_per_slot) holds, so the in-context methods see as many whole episodes as fit, as in the paper."""
    asked = config["budgets"]["trajectory_tokens"]
    return asked if asked is not None else inducer_limits(config).trajectory_room(llm_config(config))


def check_loop(config: dict[str, Any], llm: LLMConfig, limits: InducerLimits, proto: Protocol) -> None:
    """The loop's rules that its schema can not say: the sleep phases' prompts and replies fit the context, the
    protocol's batches tile its rollouts and checkpoints, the phases and the truncation analysis name configured
    instances and variants. Raises ConfigError with one message naming the key."""
    asked = config["budgets"]["trajectory_tokens"]
    room = limits.trajectory_room(llm)
    if asked is not None and asked > room:
        raise ConfigError(f"config key budgets.trajectory_tokens: {asked} tokens of episodes do not fit a sleep-phase "
                          f"prompt with llm.ctx_per_slot {llm.ctx_per_slot}; at most {room}")
    if limits.reply_tokens(llm) >= llm.ctx_per_slot:
        raise ConfigError(f"config key inducer.min_reply_tokens: {limits.min_reply_tokens} reply tokens leave no "
                          f"room for a prompt in llm.ctx_per_slot {llm.ctx_per_slot}")
    # An explicit view of the library larger than half the conversation would be cut again unseen: the first message
    # is cut to that half, and a read_library answer over the other half is trimmed out of the conversation whole.
    half = limits.history_chars(llm) // 2
    for key in ("library_chars", "read_library_chars"):
        if (chars := getattr(limits, key)) is not None and chars > half:
            raise ConfigError(f"config key inducer.{key}: {chars} characters of library do not fit the inducer's "
                              f"conversation at llm.ctx_per_slot {llm.ctx_per_slot} (inducer.history_tokens "
                              f"{limits.history_tokens}); at most {half}, or null to size it from the context")
    # a reasoning model's cap holds its reasoning too (config.validate checks the actor's): every sleep-phase role's,
    # the inducer's and each role llm.reasoning_effort names, takes a sleep-phase reply
    for role in dict.fromkeys(("inducer", *dict(llm.reasoning_effort))):
        if role != "actor":
            check_reply_cap(llm, role, limits.reply_tokens(llm))
    if proto.train_rollouts % proto.sleep_every:
        raise ConfigError(
            f"config key protocol.train_rollouts: {proto.train_rollouts} must be a multiple of protocol.sleep_every ({proto.sleep_every})"
        )
    if proto.eval_every % proto.sleep_every:
        raise ConfigError(
            f"config key protocol.eval_every: {proto.eval_every} must be a multiple of protocol.sleep_every ({proto.sleep_every})"
        )
    if proto.n_cycles > MAX_CYCLES:
        raise ConfigError(f"config key protocol.sleep_every: {proto.train_rollouts} rollouts in batches of "
                          f"{proto.sleep_every} make {proto.n_cycles} sleep cycles per run; at most {MAX_CYCLES}")
    if len(set(proto.seeds)) != len(proto.seeds):
        raise ConfigError(f"config key protocol.seeds: {list(proto.seeds)} repeats a seed (each seed is one run)")
    _check_phases(config)


def check_registries(config: dict[str, Any]) -> None:
    """SPEEDRUNNER.check, once before any job, after check_config's shared checks (so each benchmark loads): each
    variant's method is registered, its options parse, it runs on configured benchmarks its method can play, and
    each benchmark's pools hold the tasks the protocol draws."""
    if not config.get("methods"):  # no runs: the KV-cache study's or SkillScaffold's config
        return
    config = own(config)
    known = sorted(registry())
    for variant, m in config["methods"].items():
        # a name outside the registry gets the schema's message for a value outside a list: the list is the
        # registry (one home), which a new method joins by being there
        if m["method"] not in known:
            raise ConfigError(f"config key methods.{variant}.method: {m['method']!r} is not allowed; allowed values: "
                              f"{', '.join(known)}")
        try:
            get_method(m["method"]).parse_options(m["options"], variant)
        except ConfigError as e:
            where = "" if str(e).startswith("config key") else f"config key methods.{variant}.method: "
            raise ConfigError(f"{where}{e}") from None
        unknown = sorted(set(m.get("benchmarks") or []) - set(config["benchmarks"]))
        if unknown:
            raise ConfigError(f"config key methods.{variant}.benchmarks: unknown benchmark(s) {', '.join(unknown)}; "
                              f"configured: {', '.join(config['benchmarks'])}")
        if m.get("start_library") is not None:
            if m["method"] == "reference":
                raise ConfigError(f"config key methods.{variant}.start_library: the reference method's library is its "
                                  "options.library")
            try:
                Library.from_folder(m["start_library"])
            except ValueError as e:
                raise ConfigError(f"config key methods.{variant}.start_library: {e}") from None
        runs_on = m.get("benchmarks") or list(config["benchmarks"])
        check_benchmarks(variant, m["method"], m["options"], {b: config["benchmarks"][b]["env"] for b in runs_on})
    proto = protocol(config)
    for b in benchmarks(config):
        bench = load_benchmark(b)
        for split, n, key in (("train", proto.train_rollouts, "train_rollouts"), ("test", proto.n_test, "n_test")):
            pool = bench.pool_size(split)
            if pool is not None and n > pool:
                raise ConfigError(f"config key protocol.{key}: {n} {split} tasks asked for, but benchmark "
                                  f"{b.name} ({b.env}) has {pool} {split} tasks")


def _check_phases(config: dict[str, Any]) -> None:
    """`after`, `evaluate_on` and `analysis.truncation` name configured instances and variants, and the
    truncation's options are its variant's method's."""
    benches, variants = config["benchmarks"], config["methods"]

    def runs_on(v: str, b: str) -> bool:
        return variants[v].get("benchmarks") is None or b in variants[v]["benchmarks"]

    for name, b in benches.items():
        for key, targets in (("after", [b["after"]] if b.get("after") else []), ("evaluate_on", b.get("evaluate_on") or [])):
            for t in targets:
                if t not in benches or t == name:
                    raise ConfigError(f"config key benchmarks.{name}.{key}: {t!r} is not another configured benchmark; "
                                      f"configured: {', '.join(benches)}")
        seen, at = {name}, b.get("after")
        while at:
            if at in seen:
                raise ConfigError(f"config key benchmarks.{name}.after: the phases form a cycle through {at!r}")
            seen.add(at)
            at = benches[at].get("after")
        if b.get("after"):
            for v in variants:
                if runs_on(v, name) and not runs_on(v, b["after"]):
                    raise ConfigError(f"config key methods.{v}.benchmarks: {v} runs on {name}, which continues "
                                      f"{b['after']}, so it must run on {b['after']} too")
    t = (config.get("analysis") or {}).get("truncation")
    if t:
        if t["variant"] not in variants:
            raise ConfigError(f"config key analysis.truncation.variant: unknown variant {t['variant']!r}")
        if t["benchmark"] not in benches or not runs_on(t["variant"], t["benchmark"]):
            raise ConfigError(f"config key analysis.truncation.benchmark: {t['benchmark']!r} is not a benchmark "
                              f"{t['variant']} runs on")
        extra = sorted(set(t.get("seeds") or []) - set(config["protocol"]["seeds"]))
        if extra:
            raise ConfigError(f"config key analysis.truncation.seeds: {extra} are not protocol seeds")
        # the truncated evaluations run the variant with these options over its own
        m = variants[t["variant"]]
        get_method(m["method"]).parse_options({**(m.get("options") or {}), **(t.get("options") or {})},
                                              f"{t['variant']} (with analysis.truncation.options)")


@dataclass(frozen=True)
class LoopJob:
    """One loop job's typed settings (skillrepro.pipeline.start_job): the loop's, and its run's benchmark instance
    and variant where its wildcards name them (`bench`, `variant`)."""

    loop: SpeedRunnerSettings
    bench: BenchmarkConfig | None
    method: Variant | None  # the variant bound to its method, its options parsed


@dataclass(frozen=True)
class RunSettings:
    bench: BenchmarkConfig
    method: Variant  # the run's variant bound to its method
    llm: LLMConfig  # with the run's sampling seed
    sandbox: SandboxPolicy  # config key sandbox.require: every sandbox the job starts must have these layers
    prompts: Prompts  # the actor's (config section actor)


def run_settings(job: LoopJob, snakemake: Any, library_dir: Path) -> RunSettings:
    """The typed settings of a loop job's run (`job`: its settings, as start_job gave them), once the run's folder
    is known to have been made under the same settings: library v0 records them, and a job never extends a run
    made under others (say, when Snakemake's records were lost and could not rerun it)."""
    w = snakemake.wildcards
    manifest = Path(library_dir).parent / "v0" / "manifest.json"
    made = json.loads(manifest.read_text()).get("meta", {}).get("settings")
    if made != snakemake.params.settings:
        raise SettingsError(
            f"run {run_id(w.bench, w.variant, w.seed)} was started under other settings (fingerprint {made}, this "
            f"config gives {snakemake.params.settings}); rerun it from the start with `--forcerun init_library` (or "
            f"delete {manifest.parent.parent.parent}) so that no run mixes two settings"
        )
    policy = SandboxPolicy(job.loop.sandbox_require)
    probe(policy)  # logs this machine's layers; a required one that is missing fails the job before any work
    return RunSettings(job.bench, job.method, seeded(job.loop.llm, w.seed), policy, Prompts.configured(job.loop.actor))


def loop_job(config: dict[str, Any], loop: SpeedRunnerSettings, kind: str, keyed: dict[str, Any],
             params: Any) -> LoopJob:
    """SPEEDRUNNER.job: a loop job's typed settings, for its `bench` and `variant` (None where it has none)."""
    bench, variant = keyed["bench"], keyed["variant"]
    return LoopJob(loop, loop.benchmarks[bench] if bench else None, bind(loop.methods[variant]) if variant else None)


def run_fingerprint(config: dict[str, Any], built: Any, kind: str, *, bench: str | None = None,
                    variant: str | None = None) -> str:
    """A loop job's: what its kind reads (SPEEDRUNNER.reads) of its run's `bench` and `variant`."""
    return loop_fingerprint(config, SPEEDRUNNER.kind(kind), bench=bench, variant=variant)


def loop_fingerprint(config: dict[str, Any], reads: tuple[str, ...], *, bench: str | None = None,
                     variant: str | None = None) -> str:
    """Fingerprint of the parts `reads` names of the run `bench` x `variant`. Beside the shared parts
    (contract.settings_fingerprint), "actor" is the section with its prompt files' contents, and "method" the
    variant's method with its options, their defaults filled in (writing a default out is no change) and the
    contents of the files they name (a prompt file the user replaces in place is a new setting too)."""
    chosen: dict[str, Any] = {}
    for part in reads:
        if part == "method":
            m = config["methods"][variant]
            options = get_method(m["method"]).parse_options(m.get("options"), variant)
            chosen[part] = {"method": m["method"], "options": options, "start_library": m.get("start_library")}
            files = {f.name: ([file_digest(x) for x in v] if isinstance(v, (list, tuple)) else file_digest(v))
                     for f in dataclasses.fields(options)
                     if f.name.endswith("_file") and (v := getattr(options, f.name))}
            if m.get("start_library") is not None:  # its contents: a library edited in place is a new start
                files["start_library"] = [file_digest(Path(m["start_library"]) / n) for n in ("skills.py", "notes.md")]
            if files:
                chosen[part]["file_contents"] = files
        elif part == "actor":
            chosen[part] = {**config["actor"], "file_contents": {name: file_digest(path) for name, path in
                                                                 actor_config(config).prompt_files}}
        else:
            chosen[part] = config_part(config, part, bench)
    return fingerprint(chosen)


SPEEDRUNNER = Study(
    name="speedrunner",
    sections=("methods", "protocol", "inducer", "analysis"),
    schema=SCHEMA,
    builder=speedrunner_settings,
    # "benchmark", "call_budget" and "method" are the job's own benchmarks.<bench> (without its call budget and
    # evaluate_on), benchmarks.<bench>.llm_call_budget and methods.<variant> (run_fingerprint)
    reads={
        "run": ("llm", "actor", "benchmark", "call_budget", "method"),  # a run's rollouts, sleep phases, evaluations
        "sleep": ("inducer",),  # a sleep phase's limits and model, beside its run's
        "tasks": ("benchmark",),  # a benchmark's task lists
        "instance": ("benchmark", "call_budget"),  # another instance a run is evaluated on (its `bench`)
        # the tables and figures of every run: what analysis.study_of reads, and the model figure 3 prices
        "tables": ("llm.model", "methods", "benchmarks", "protocol.sleep_every", "protocol.train_rollouts", "pricing"),
        "views": ("pricing",),  # a run's pages: their dollars
    },
    keyed_by=("bench", "variant"),
    fingerprint=run_fingerprint,
    job=loop_job,
    parts={"benchmark": "benchmarks.{bench}", "call_budget": "benchmarks.{bench}.llm_call_budget",
           "method": "methods.{variant}"},
    wildcards=("bench", "variant", "seed", "k", "split", "target", "n"),
    check=check_registries,
    models=sleep_models,
    layout=(Run,),
)
