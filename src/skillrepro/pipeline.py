"""Glue shared by the workflow scripts: logging to the rule's log file, a run's identity and settings."""
from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from skillrepro import config as cfg
from skillrepro.config import BenchmarkConfig, LLMConfig, MethodConfig


class RunSettingsError(RuntimeError):
    """A run folder was made under other settings than the job's."""


def setup_logging(snakemake: Any) -> logging.Logger:
    """Log to the rule's log file (and to stderr when run by hand); returns the script's logger."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if snakemake.log:
        handlers = [logging.FileHandler(snakemake.log[0], mode="w")]
    logging.basicConfig(level=logging.INFO, handlers=handlers, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpx2", "openai", "httpcore", "httpcore2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return logging.getLogger(f"skillrepro.{snakemake.rule}")


def run_id(wildcards: Any) -> str:
    return f"{wildcards.bench}/{wildcards.variant}/seed{wildcards.seed}"


def seeded(llm: LLMConfig, seed: int) -> LLMConfig:
    """The run's sampling seed: each training seed samples differently, reproducibly."""
    return replace(llm, seed=llm.seed + 1000 * int(seed))


@dataclass(frozen=True)
class RunSettings:
    bench: BenchmarkConfig
    method: MethodConfig
    llm: LLMConfig  # with the run's sampling seed


def run_settings(snakemake: Any, library_dir: Path) -> RunSettings:
    """The typed settings of this job's run, rebuilt from the config (the rule's params carry only their
    fingerprint, `settings`), once the run's folder is known to have been made under the same settings:
    library v0 records them, and a job never extends a run made under others (say, when Snakemake's
    records were lost and could not rerun it)."""
    w, c = snakemake.wildcards, snakemake.config
    manifest = Path(library_dir).parent / "v0" / "manifest.json"
    made = json.loads(manifest.read_text()).get("meta", {}).get("settings")
    if made != snakemake.params.settings:
        raise RunSettingsError(
            f"run {run_id(w)} was started under other settings (fingerprint {made}, this config gives "
            f"{snakemake.params.settings}); rerun it from the start with `--forcerun init_library` (or delete "
            f"{manifest.parent.parent.parent}) so that no run mixes two settings"
        )
    return RunSettings(cfg.benchmark(c, w.bench), cfg.method(c, w.variant), seeded(cfg.llm_config(c), w.seed))
