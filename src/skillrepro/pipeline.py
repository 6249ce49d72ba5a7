"""Glue shared by the workflow scripts: logging to the rule's log file and a run's identity."""
from __future__ import annotations

import logging
import sys
from dataclasses import replace
from typing import Any

from skillrepro.config import LLMConfig


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
