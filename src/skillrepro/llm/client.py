"""One OpenAI-compatible client for every backend, with retries and a record of every call."""
from __future__ import annotations

import hashlib
import json
import os
import random
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import openai

from skillrepro.config import LLMConfig
from skillrepro.llm.servers import URL_ENV
from skillrepro.store import LLMCall


class LLMFatalError(RuntimeError):
    """A failure retrying cannot fix (bad key, unknown model or URL)."""


class LLMRequestError(RuntimeError):
    """The server rejected this request (for example, the prompt exceeds the context)."""


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Reply:
    text: str
    tool_calls: list[ToolCall]
    finish_reason: str
    record: LLMCall


@dataclass
class LLMClient:
    cfg: LLMConfig
    base_url: str
    api_key: str = "none"
    records: list[LLMCall] = field(default_factory=list)
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0

    def __post_init__(self):
        # The SDK's own retries are off: ours are counted and recorded.
        self._client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key, max_retries=0,
                                     timeout=self.cfg.timeout_s)

    @classmethod
    def connect(cls, cfg: LLMConfig) -> "LLMClient":
        """Client for the configured server: `base_url`, else the one this snakemake run started."""
        url = cfg.base_url or os.environ.get(URL_ENV)
        if not url:
            raise LLMFatalError(
                f"no LLM server: set llm.base_url, or run through snakemake (which starts one), "
                f"or export {URL_ENV} (see `skillrepro serve`)"
            )
        key = os.environ.get(cfg.api_key_env, "none") if cfg.backend == "openai" else "none"
        return cls(cfg, url.rstrip("/"), key)

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        role: str,
        session_id: str,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        stop: list[str] | None = None,
        seed: int = 0,
        extra_body: dict[str, Any] | None = None,
    ) -> Reply:
        """One chat completion. `seed` is added to the configured seed: callers vary it per request, since
        one fixed seed makes a small model draw the same reply again whenever its context barely changes.
        `extra_body`: server-specific request fields (a llama.cpp `grammar`, vLLM `structured_outputs`)."""
        request: dict[str, Any] = dict(
            model=self.cfg.model,
            messages=messages,
            temperature=self.cfg.temperature,
            max_tokens=max_tokens or self.cfg.max_tokens,
            seed=(self.cfg.seed + seed) % 2**31,
        )
        if tools:
            request["tools"] = tools
            request["parallel_tool_calls"] = False
        if stop:
            request["stop"] = stop
        if extra_body:
            request["extra_body"] = extra_body
        prompt_json = json.dumps({"messages": messages, "tools": tools or []}, ensure_ascii=False)
        started = time.time()
        response, retries = self._with_retries(request)
        latency = time.time() - started
        choice = response.choices[0]
        msg = choice.message
        calls = []
        for tc in msg.tool_calls or []:
            try:
                args = json.loads(tc.function.arguments or "{}")
            except json.JSONDecodeError:
                args = {"__unparsed__": tc.function.arguments}
            calls.append(ToolCall(tc.id or uuid.uuid4().hex[:8], tc.function.name, args if isinstance(args, dict) else {"__unparsed__": args}))
        usage = response.usage
        ptd = getattr(usage, "prompt_tokens_details", None)
        ctd = getattr(usage, "completion_tokens_details", None)
        text = msg.content or ""
        record = LLMCall(
            call_id=uuid.uuid4().hex,
            session_id=session_id,
            role=role,
            model=response.model or self.cfg.model,
            backend=self.cfg.backend,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            cached_tokens=(ptd.cached_tokens or 0) if ptd else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            reasoning_tokens=(getattr(ctd, "reasoning_tokens", 0) or 0) if ctd else 0,
            latency_s=latency,
            retries=retries,
            finish_reason=choice.finish_reason or "",
            prompt_sha256=hashlib.sha256(prompt_json.encode()).hexdigest(),
            prompt=prompt_json,
            response=json.dumps({"content": text, "tool_calls": [c.__dict__ for c in calls]}, ensure_ascii=False),
            started_at=started,
        )
        self.records.append(record)
        return Reply(text, calls, record.finish_reason, record)

    def _with_retries(self, request: dict[str, Any]):
        retries = 0
        while True:
            try:
                return self._client.chat.completions.create(**request), retries
            except openai.AuthenticationError as e:
                raise LLMFatalError(f"401 unauthorized from {self.base_url}: check the key in ${self.cfg.api_key_env}") from e
            except openai.NotFoundError as e:
                raise LLMFatalError(f"404 not found from {self.base_url}: wrong base_url or model {self.cfg.model!r}") from e
            except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError) as e:
                # APITimeoutError is an APIConnectionError.
                if retries >= self.cfg.max_retries:
                    raise LLMFatalError(f"LLM request failed after {retries} retries: {e}") from e
            except openai.APIStatusError as e:
                if e.status_code < 500:
                    raise LLMRequestError(f"{e.status_code} from {self.base_url}: {e.message}") from e
                if retries >= self.cfg.max_retries:
                    raise LLMFatalError(f"LLM request failed after {retries} retries: {e}") from e
            delay = min(self.backoff_cap_s, self.backoff_base_s * 2**retries)
            time.sleep(delay * random.uniform(0.5, 1.0))  # jitter spreads out jobs that failed together
            retries += 1

    def take_records(self) -> list[LLMCall]:
        out, self.records = self.records, []
        return out


@contextmanager
def session(cfg: LLMConfig, workdir: str = ".") -> Iterator[LLMClient]:
    """A client for the shared server of this run, or, when none is exported (a cluster job, a script run
    by hand), for a server started for this job alone and stopped when the block ends."""
    from skillrepro.llm import servers

    if cfg.base_url or os.environ.get(URL_ENV) or cfg.backend == "openai":
        yield LLMClient.connect(cfg)
        return
    server = servers.start(cfg, workdir=workdir)
    try:
        yield LLMClient(cfg, server.url)
    finally:
        server.stop()
