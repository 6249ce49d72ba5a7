"""Shared fixtures. `llm_url` is a real embedded llama.cpp server (SmolLM2-135M) for the whole session."""
from __future__ import annotations

import os

import pytest

from skillrepro.config import LLMConfig

TEST_MODEL = os.environ.get("SKILLREPRO_TEST_MODEL", "smollm2-135m")


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
