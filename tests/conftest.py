"""Shared fixtures. `llm_url` is a real embedded llama.cpp server (SmolLM2-135M) for the whole session."""
from __future__ import annotations

import os

import pytest

from skillrepro.config import LLMConfig

TEST_MODEL = os.environ.get("SKILLREPRO_TEST_MODEL", "smollm2-135m")


@pytest.fixture
def needs_bwrap():
    """For a test whose containment only bubblewrap gives (a uid of nobody, a bounded scratch, an empty
    environment): without it the failure says so, instead of an assertion about a uid."""
    from skillrepro.skills import sandbox

    path, why = sandbox._bwrap()
    if path is None:
        pytest.fail(f"this test needs bubblewrap, the sandbox's outer layer (a README prerequisite): {why}",
                    pytrace=False)


@pytest.fixture(scope="session")
def llm_cfg() -> LLMConfig:
    return LLMConfig(backend="embedded", model=TEST_MODEL, slots=2, ctx_per_slot=4096, max_tokens=48,
                     temperature=0.7, seed=1, max_retries=2, timeout_s=300)


@pytest.fixture(scope="session")
def llm_url(llm_cfg, tmp_path_factory):
    """Start the embedded server in a child process, exactly as the workflow does."""
    from skillrepro.llm import servers

    server = servers.start(llm_cfg, workdir=tmp_path_factory.mktemp("llm"))
    os.environ[servers.URL_ENV] = server.url
    yield server.url
    server.stop()
    os.environ.pop(servers.URL_ENV, None)


@pytest.fixture(scope="session")
def run_scaffold(llm_cfg, llm_url):
    """Run a target of rules/scaffold.smk on BabyAI in folder `wd`, against the shared server; returns `wd`."""
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]

    def run(wd, target: str, *, call_budget: int, scaffold: dict):
        (wd / "Snakefile").write_text(f'configfile: "config.yaml"\ninclude: "{root}/rules/scaffold.smk"\n')
        cfg = {
            "llm": {"backend": "embedded", "model": llm_cfg.model, "max_tokens": 48, "slots": 2,
                    "ctx_per_slot": llm_cfg.ctx_per_slot, "seed": 1, "tool_calling": "text", "threads": llm_cfg.threads},
            "benchmarks": {"babyai": {"env": "babyai", "llm_call_budget": call_budget}},
            "budgets": {"rollout_wall_s": 300},
            "protocol": {"task_seed": 42},
            "scaffold": scaffold,
        }
        (wd / "config.yaml").write_text(yaml.safe_dump(cfg))
        proc = subprocess.run([sys.executable, "-m", "snakemake", target, "--cores", "2"], cwd=wd,
                              env=dict(os.environ, SKILLREPRO_LLM_URL=llm_url), capture_output=True, text=True,
                              timeout=3000)
        assert proc.returncode == 0, proc.stderr[-4000:]
        return wd

    return run
