"""SpeedRunner's part of a rehearsal (skillrepro/rehearsal.py): its sections at the rehearsal's counts, and the
library sizes its runs reached.

The actor's requests carry paper-scale libraries. On the API stand-in, SpeedRunner's inducer is scripted: it writes
`library_size` functions over the sleep phases. A method whose growth nothing scripted drives (on the vLLM engine
every one; on the stand-in ASI, which learns from won episodes only, and Voyager, one skill a goal its critic judged
reached) starts instead from a library of stand-in functions of the size the paper reports for it (`PAPER_SIZES`,
through the variant's `start_library`), which its own sleep phases then extend.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from skillrepro.config import ConfigError
from skillrepro.studies.speedrunner.paths import RESULTS, RUN

# Library v0 of a rehearsal's variants by method: the largest size the paper reports. SpeedRunner about 40 and ASI
# about 160 functions by the end of the distribution shift (section 6.4); Voyager 909, the final Crafter library
# of table 8 (whose largest truncation shows 800 of them).
PAPER_SIZES = {"speedrunner": 40, "asi": 160, "asi_replay": 160, "voyager": 909}
SCRIPTED = {"speedrunner"}  # methods whose writer the API stand-in plays: they grow to library_size from empty


def start_library(folder: Path, size: int) -> Path:
    """A library folder of `size` stand-in functions (Library.from_folder reads it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "skills.py").write_text("\n\n".join(
        f'def rehearsal_start_{i}():\n    """Stand-in start skill {i} of the rehearsal."""\n    return "start {i}"\n'
        for i in range(size)))
    return folder


def reduce(cfg: dict[str, Any], r: Any, workdir: Path) -> str:
    """Shrink `cfg`'s SpeedRunner sections in place to `r` (a rehearsal.Reduction) and write the start libraries
    its variants begin from under `workdir`; returns what it did, in words."""
    api = cfg["llm"]["backend"] == "openai"
    cfg.setdefault("budgets", {})["inducer_requests"] = r.inducer_requests
    if (cfg.get("inducer") or {}).get("model") and not api:
        cfg["inducer"]["model"] = None  # one engine serves both roles
    keep = set(r.benchmarks or cfg["benchmarks"])
    unknown = keep - set(cfg["benchmarks"])
    if unknown:
        raise ConfigError(f"rehearse --benchmarks: {', '.join(sorted(unknown))} not in the preset's benchmarks "
                          f"({', '.join(cfg['benchmarks'])})")
    benchmarks = {}
    for name, b in cfg["benchmarks"].items():
        if name not in keep or (b.get("after") and b["after"] not in keep):
            continue
        b = dict(b)
        if b.get("evaluate_on"):
            b["evaluate_on"] = [e for e in b["evaluate_on"] if e in keep]
        b["llm_call_budget"] = min(b.get("llm_call_budget") or r.call_budget, r.call_budget)
        benchmarks[name] = b
    cfg["benchmarks"] = benchmarks
    unknown = set(r.variants or ()) - set(cfg["methods"])
    if unknown:
        raise ConfigError(f"rehearse --variants: {', '.join(sorted(unknown))} not in the preset's methods "
                          f"({', '.join(cfg['methods'])})")
    methods, starts = {}, {}
    for variant, m in cfg["methods"].items():
        if r.variants and variant not in r.variants:
            continue
        m = dict(m)
        if m.get("benchmarks") is not None:
            m["benchmarks"] = [b for b in m["benchmarks"] if b in benchmarks]
            if not m["benchmarks"]:
                continue
        if m["method"] in PAPER_SIZES and not (api and m["method"] in SCRIPTED):
            m["start_library"] = str(start_library(workdir / "start_library" / m["method"], PAPER_SIZES[m["method"]]))
            starts[variant] = PAPER_SIZES[m["method"]]
        methods[variant] = m
    cfg["methods"] = methods
    truncation = (cfg.get("analysis") or {}).get("truncation")
    if truncation and (truncation.get("variant") not in methods or truncation.get("benchmark") not in benchmarks):
        cfg["analysis"].pop("truncation")
    seeds = cfg["protocol"].get("seeds") or [0]
    cfg["protocol"].update(seeds=seeds[:1], train_rollouts=r.train_rollouts, sleep_every=1,
                           eval_every=r.train_rollouts, n_test=r.n_test)
    return (f"SpeedRunner: 1 seed, {r.train_rollouts} training rollouts with a sleep phase after each "
            f"({r.inducer_requests} inducer requests a sleep), {r.n_test} test task(s) at v0 and v{r.train_rollouts}, "
            f"at most {r.call_budget} actor calls an episode; benchmarks {', '.join(benchmarks)}; variants "
            f"{', '.join(methods)}; "
            + (f"the stand-in's writer grows {', '.join(sorted(SCRIPTED))} to {r.library_size} functions; " if api else "")
            + "start libraries (stand-in functions): "
            + (", ".join(f"{v} {n}" for v, n in starts.items()) or "none"))


def report(workdir: Path) -> list[str]:
    """Each run's last library version: its public functions, keyed benchmark/variant/seed."""
    out = {}
    runs = workdir / RESULTS / "runs"
    for run in sorted(p for p in workdir.glob(RUN.format(bench="*", variant="*", seed="*")) if (p / "library").is_dir()):
        versions = sorted((run / "library").glob("v*/manifest.json"), key=lambda p: int(p.parent.name[1:]))
        if versions:
            functions = json.loads(versions[-1].read_text()).get("functions", [])
            out[str(run.relative_to(runs))] = sum(1 for f in functions if f.get("public"))
    return ["final libraries (public functions): " + (", ".join(f"{k} {n}" for k, n in out.items()) or "none")]
