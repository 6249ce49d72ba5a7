"""One OpenAI-compatible client for every backend, with retries and a record of every call.

Long because retries, fault kinds, the usage fallback and the ledger all act on one request and its record.

Requests go through the `openai` SDK: one transport for the hosted API, vLLM and llama.cpp, the
one their maintainers keep in step with the protocol. The SDK's own retries are off, so this client's policy
decides (its fault kinds, Retry-After), and its raw reply is taken and the JSON body parsed here, so
llama.cpp's extra fields and every kind of bad reply are still seen. Server-specific fields (a llama.cpp
`grammar`, vLLM `structured_outputs`) go in what the SDK calls `extra_body`.

What the SDK costs (perf/client_overhead.py, on the shared 2-core CPU machine): its import, about 0.75-0.95 s
of wall and CPU time in a fresh process (its thousands of pydantic types), so it is imported when the first
client is made, not with this module, and a command that never makes a request does not pay it; and per
request about 0.5-0.75 ms more than the same body POSTed directly with httpx (1.5-1.85x, against a local
server that answers at once), nothing beside a model's reply. Its typed `chat.completions.create` would
cost ~6 ms a request (it walks every message and tool schema against its parameter types): not used."""
from __future__ import annotations

import dataclasses
import email.utils
import hashlib
import json
import logging
import os
import random
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from skillrepro.config import LLMConfig
from skillrepro.llm import limits, servers
from skillrepro.llm.ledger import Ledger, request_key
from skillrepro.llm.servers import URL_ENV
from skillrepro.llm.tokenize import server_root, tokenize
from skillrepro.store import LLMCall


class LLMFatalError(RuntimeError):
    """A failure retrying cannot fix (bad key, unknown model or URL)."""


class LLMRequestError(RuntimeError):
    """The server refused this request with a 4xx that retrying cannot change. `context_full`: it refused it
    because the prompt and the reply's cap do not fit the context (llm/limits.py says how each backend tells
    it), which the actor counts as an outcome (termination "context"); any other refusal is a setup problem."""

    def __init__(self, message: str, status: int = 400, error: dict[str, Any] | None = None,
                 context_full: bool = False):
        super().__init__(message)
        self.status, self.error, self.context_full = status, error or {}, context_full


class HTTPStatusError(Exception):
    """A reply with a status other than 200."""

    def __init__(self, status: int, error: dict[str, Any], headers: Any):
        self.message = str(error.get("message", ""))
        super().__init__(f"{status}: {self.message}")
        self.status, self.error, self.headers = status, error, headers


class TransportFault(Exception):
    """No reply came: `kind` is "timeout" or "connection" (refused, reset, cut off mid-reply)."""

    def __init__(self, kind: str, error: BaseException):
        cause = error.__cause__ or error  # the SDK's "Connection error." wraps what happened
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.kind = kind


class BadReply(Exception):
    """The server answered 200 with something that is not a usable completion; asking again may fix it."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


log = logging.getLogger(__name__)


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
    record: LLMCall  # the request this reply is, with that request's own counts
    # requests made and set aside before it (a reply empty at its cap, asked again): billed, so recorded, each
    # with its own counts; `records` lists them with `record` last
    earlier: list[LLMCall] = field(default_factory=list)

    @property
    def records(self) -> list[LLMCall]:
        return [*self.earlier, self.record]


@dataclass
class LLMClient:
    cfg: LLMConfig
    base_url: str
    api_key: str = "none"
    records: list[LLMCall] = field(default_factory=list)
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0
    retry_after_cap_s: float = 600.0  # a server's Retry-After is honoured up to this
    ledger: Ledger | None = None  # the run's response cache and dollar cap (llm/ledger.py); None: neither

    def __post_init__(self):
        # lazy: start-up cost: the SDK's import (~0.3-0.9 s), paid when the first client is made (module docstring)
        import openai

        # made with the client, not at its first request, so no record's latency holds the import
        self._sdk = openai.OpenAI(base_url=self.base_url, api_key=self.api_key, max_retries=0,
                                  timeout=self.cfg.timeout_s)

    def _post(self, request: dict[str, Any]) -> dict[str, Any]:
        """POST one chat-completions request; the reply's JSON object. Raises HTTPStatusError for a status
        other than 200, TransportFault when no reply came, UnicodeDecodeError or ValueError for a bad body.

        Through the SDK's `post`, not `chat.completions.create`: `create` first walks the whole request
        against its parameter types (a copy of every message and tool schema): ~6 ms a call, ~4x `post`
        (perf/client_overhead.py), for the same body on the wire. The fields
        `create` does not name (a grammar, cache_prompt) go in what its `extra_body` becomes."""
        # lazy: start-up cost: the SDK's transport, loaded with the SDK by __post_init__ (here a lookup)
        import httpx2
        # lazy: start-up cost: loaded by __post_init__ (here a lookup)
        import openai

        fields = {k: v for k, v in request.items() if k in _SDK_FIELDS}
        extra = {k: v for k, v in request.items() if k not in _SDK_FIELDS}
        try:  # cast_to=httpx2.Response: the raw reply, its body not parsed by the SDK
            r = self._sdk.post("/chat/completions", cast_to=httpx2.Response, body=fields,
                               options={"extra_json": extra} if extra else {})
        except openai.APIStatusError as e:
            raise HTTPStatusError(e.status_code, _error_object(e.response.content), e.response.headers) from e
        except openai.APITimeoutError as e:  # before APIConnectionError: it is one
            raise TransportFault("timeout", e) from e
        except openai.APIConnectionError as e:
            raise TransportFault("connection", e) from e
        if r.status_code != 200:  # another 2xx: the SDK takes it for success
            raise HTTPStatusError(r.status_code, _error_object(r.content), r.headers)
        body = json.loads(r.content.decode("utf-8"))
        if not isinstance(body, dict):
            raise ValueError("the reply is not a JSON object")
        return body

    @classmethod
    def connect(cls, cfg: LLMConfig, cache: bool = True) -> "LLMClient":
        """Client for the configured server: `base_url`, else the one this snakemake run started; it draws on
        the job's run ledger (`use_ledger`), its response cache left out where `cache` is false."""
        url = cfg.base_url or os.environ.get(URL_ENV)
        if not url:
            raise LLMFatalError(
                f"no LLM server: set llm.base_url, or run through snakemake (which starts one), "
                f"or export {URL_ENV} (see `skillrepro serve`)"
            )
        key = os.environ.get(cfg.api_key_env, "none") if cfg.backend == "openai" else "none"
        return cls(cfg, url.rstrip("/"), key, ledger=_run_ledger(cache))

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
            seed=(self.cfg.seed + seed) % 2**31,
        )
        # Which fields a model accepts is a per-model setting (llm.max_tokens_param, llm.send_temperature).
        # The cap leaves room for the reasoning the role's effort asks for (llm.reasoning_room).
        cap = self.cfg.reply_cap(role, max_tokens or self.cfg.max_tokens)
        request[self.cfg.max_tokens_param] = cap
        if self.cfg.send_temperature:
            request["temperature"] = self.cfg.temperature
        if self.cfg.top_p is not None:
            request["top_p"] = self.cfg.top_p
        if tools:
            request["tools"] = tools
            request["parallel_tool_calls"] = False
        if stop:
            request["stop"] = stop
        effort = self.cfg.effort(role)  # None for the embedded llama.cpp, which accepts and ignores it
        if effort:
            request["reasoning_effort"] = effort
        if extra_body:
            request.update(extra_body)
        # the record holds what shaped the reply: the messages, the tools and any decoding constraint
        prompt_json = json.dumps({"messages": messages, "tools": tools or [], **(extra_body or {})}, ensure_ascii=False)
        started = time.time()
        response, faults, hit = self._ask(request, role)
        earlier = []
        if _empty_at_cap(response) and self.cfg.cap_retry_factor > 1:
            # the capped request is a record of its own (billed, and one server request to a cache study);
            # the retry's record lists the fault it answers
            earlier.append(self._record(role, session_id, messages, prompt_json, response, started, faults, hit))
            request[self.cfg.max_tokens_param] = cap * self.cfg.cap_retry_factor
            log.warning("empty reply at its cap of %d tokens (role %s); asking again with %d", cap, role,
                        request[self.cfg.max_tokens_param])
            started = time.time()
            response, more, hit = self._ask(request, role)
            faults = ["empty_at_cap", *more]
        record = self._record(role, session_id, messages, prompt_json, response, started, faults, hit)
        self.records += [*earlier, record]
        choice = response["choices"][0]
        return Reply(choice["message"].get("content") or "", _tool_calls(choice["message"]), record.finish_reason,
                     record, earlier)

    def _ask(self, request: dict[str, Any], role: str) -> tuple[dict[str, Any], list[str], bool]:
        """The reply to `request`, the faults retried before it and whether it came from the run's response
        cache; a request sent is first checked against, and then charged to, the run's dollar cap."""
        if self.ledger is None:
            return *self._with_retries(request, role), False
        key = request_key(self.cfg.backend, request)
        if (kept := self.ledger.cached(key)) is not None:
            return kept, [], True
        rid = self.ledger.reserve(self.cfg.model, role, len(json.dumps(request).encode()),
                                  request[self.cfg.max_tokens_param])
        dollars = 0.0  # a request that got no reply is counted as free: servers bill none of their errors
        try:
            response, faults = self._with_retries(request, role)
            usage = response.get("usage") or {}
            price = self.ledger.prices.get(self.cfg.model)
            if price is not None and rid is not None:
                if usage.get("prompt_tokens") is None or usage.get("completion_tokens") is None:
                    dollars = self.ledger.reserved(rid)  # unknown: the worst case stays charged
                else:
                    dollars = price.cost(int(usage["prompt_tokens"]), reported_cached_tokens(response),
                                         int(usage["completion_tokens"]))
        finally:
            self.ledger.settle(rid, dollars)
        self.ledger.keep(key, response)
        return response, faults, False

    def _record(self, role: str, session_id: str, messages: list[dict], prompt_json: str, response: dict[str, Any],
                started: float, faults: list[str], from_cache: bool = False) -> LLMCall:
        """One server request's record: its usage as the server reported it (counted where it reported none)."""
        choice = response["choices"][0]
        calls = _tool_calls(choice["message"])
        usage = response.get("usage") or {}
        ctd = usage.get("completion_tokens_details") or {}
        text = choice["message"].get("content") or ""
        response_json = json.dumps({"content": text, "tool_calls": [c.__dict__ for c in calls]}, ensure_ascii=False)
        usage_missing = usage.get("prompt_tokens") is None or usage.get("completion_tokens") is None
        if usage_missing:
            # Never a silent 0 that under-counts cost: count with the server's tokenizer where it has one,
            # and flag the record either way.
            prompt_tokens, completion_tokens = self._count_tokens(messages, response_json if calls else text)
            log.warning("reply without usage from %s; counted %d prompt, %d completion tokens with the "
                        "server's tokenizer (0 where it has none)", self.base_url, prompt_tokens, completion_tokens)
        else:
            prompt_tokens, completion_tokens = int(usage["prompt_tokens"]), int(usage["completion_tokens"])
        return LLMCall(
            call_id=uuid.uuid4().hex,
            session_id=session_id,
            role=role,
            # the configured name, which `pricing` keys: servers answer with a file path (llama.cpp) or a
            # dated snapshot (hosted APIs), which no price table names
            model=self.cfg.model,
            backend=self.cfg.backend,
            prompt_tokens=prompt_tokens,
            cached_tokens=reported_cached_tokens(response),
            completion_tokens=completion_tokens,
            reasoning_tokens=int(ctd.get("reasoning_tokens") or 0),
            latency_s=time.time() - started,
            retries=len(faults),
            finish_reason=choice.get("finish_reason") or "",
            prompt_sha256=hashlib.sha256(prompt_json.encode()).hexdigest(),
            prompt=prompt_json,
            response=response_json,
            started_at=started,
            faults=faults,
            usage_missing=usage_missing,
            from_cache=from_cache,
        )

    def _with_retries(self, request: dict[str, Any], role: str) -> tuple[dict[str, Any], list[str]]:
        """The reply and the kind of each fault retried before it ("429", "503", "connection", "timeout",
        "truncated_json", "invalid_utf8", "empty_choices", "null_message")."""
        faults: list[str] = []
        while True:
            wait = None
            try:
                response = self._post(request)
                _check_reply(response)
                return response, faults
            except HTTPStatusError as e:
                if e.status == 401:
                    raise LLMFatalError(f"401 unauthorized from {self.base_url}: check the key in ${self.cfg.api_key_env}") from e
                if e.status == 404:
                    raise LLMFatalError(f"404 not found from {self.base_url}: wrong base_url or model {self.cfg.model!r}") from e
                if e.status < 500 and e.status not in (408, 409, 429):
                    raise self._refused(request, role, e) from e
                kind, wait, error = str(e.status), retry_after(e.headers), e
            except TransportFault as e:
                kind, error = e.kind, e
            except UnicodeDecodeError as e:  # before ValueError: it is one
                kind, error = "invalid_utf8", e
            except ValueError as e:  # the body is not JSON (cut short), or not an object
                kind, error = "truncated_json", e
            except BadReply as e:
                kind, error = e.kind, e
            faults.append(kind)
            if len(faults) > self.cfg.max_retries:
                raise LLMFatalError(f"LLM request failed after {len(faults) - 1} retries ({', '.join(faults)}): "
                                    f"{type(error).__name__}: {str(error)[:300]}") from error
            if wait is None:
                # jitter spreads out jobs that failed together
                wait = min(self.backoff_cap_s, self.backoff_base_s * 2 ** (len(faults) - 1)) * random.uniform(0.5, 1.0)
            log.warning("LLM fault %s from %s; retry %d in %.1f s", kind, self.base_url, len(faults), wait)
            time.sleep(min(wait, self.retry_after_cap_s))

    def _refused(self, request: dict[str, Any], role: str, e: HTTPStatusError) -> LLMRequestError:
        """The refusal of `request` as an error that names the request (its role, size and tools) and the
        provider's error fields, and says whether it was a full context (llm/limits.py)."""
        full = limits.context_overflow(self.cfg.backend, e.status, e.error, lambda: self._measured_full(request))
        fields = ", ".join(f"{k} {e.error[k]!r}" for k in ("type", "code", "param", "status")
                           if e.error.get(k) is not None)
        tools = request.get("tools") or []
        return LLMRequestError(
            f"{e.status} from {self.base_url} ({fields or 'no error code'}) for one {role} request to "
            f"{self.cfg.model!r}: {len(request['messages'])} messages, {len(json.dumps(request['messages']))} "
            f"characters, {len(tools)} tools, a cap of {request.get(self.cfg.max_tokens_param)} tokens: "
            f"{e.message[:500]}", e.status, e.error, full)

    def _measured_full(self, request: dict[str, Any]) -> bool:
        """Whether the request's prompt, counted with its tools, leaves less than its reply's cap in
        llm.ctx_per_slot (vLLM's --max-model-len, an API model's window): by the server's tokenizer on vLLM, by
        limits.LOW_CHARS_PER_TOKEN on an API that has none (Gemini's)."""
        cap = int(request.get(self.cfg.max_tokens_param) or 1)
        if self.cfg.backend == "openai":
            chars = len(json.dumps([request["messages"], request.get("tools") or []]))
            return chars // limits.LOW_CHARS_PER_TOKEN + cap > self.cfg.ctx_per_slot
        try:
            n = len(tokenize(server_root(self.base_url), self.cfg.backend, messages=request["messages"],
                             tools=request.get("tools"), model=self.cfg.model, timeout_s=self.cfg.timeout_s))
        except (OSError, KeyError, ValueError) as err:
            log.warning("could not count the refused prompt's tokens with the server's /tokenize: %s", err)
            return False
        return n + cap > self.cfg.ctx_per_slot

    def _count_tokens(self, messages: list[dict[str, Any]], completion: str) -> tuple[int, int]:
        """Prompt and completion tokens by the server's own tokenizer: llama.cpp's /apply-template and
        /tokenize (embedded), vLLM's /tokenize; (0, 0) for an API without one. The record is flagged
        usage_missing either way."""
        root, backend, model = server_root(self.base_url), self.cfg.backend, self.cfg.model
        try:
            if backend in ("embedded", "vllm"):
                return (len(tokenize(root, backend, messages=messages, model=model, parse_special=True,
                                     timeout_s=self.cfg.timeout_s)),
                        len(tokenize(root, backend, text=completion, model=model, parse_special=True,
                                     timeout_s=self.cfg.timeout_s)))
        except (OSError, KeyError, ValueError) as e:
            log.warning("could not count tokens with %s/tokenize: %s", root, e)
        return 0, 0

    def take_records(self) -> list[LLMCall]:
        out, self.records = self.records, []
        return out


# The request fields the SDK's `create` takes by name; any other goes in its extra_body.
_SDK_FIELDS = frozenset({"model", "messages", "seed", "max_tokens", "max_completion_tokens", "temperature", "top_p",
                         "tools", "parallel_tool_calls", "stop", "reasoning_effort"})


def reported_cached_tokens(response: dict[str, Any]) -> int | None:
    """The prompt tokens the server says it served from its cache: `usage.prompt_tokens_details.cached_tokens`
    (OpenAI, vLLM with --enable-prompt-tokens-details, llama.cpp), else llama.cpp's own `timings.cache_n`;
    None when the reply carries neither. Unknown is not 0: a vLLM started without the flag must not read as
    a cache that never hits."""
    usage = response.get("usage") or {}
    for value in ((usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
                  (response.get("timings") or {}).get("cache_n")):
        if value is not None:
            return int(value)
    return None


def _error_object(content: bytes) -> dict[str, Any]:
    """The `error` object of an error reply (message, type, code, param as the provider gives them); a body
    that has none (an HTML page from a proxy) becomes its start as the message. Gemini wraps it in a list."""
    try:
        body = json.loads(content)
        body = body[0] if isinstance(body, list) and body else body
        error = body["error"]
        if isinstance(error, dict) and "message" in error:
            return error
        return {"message": str(error)}
    except (ValueError, KeyError, TypeError, IndexError):
        return {"message": content[:300].decode("utf-8", "replace")}


def _tool_calls(msg: dict[str, Any]) -> list[ToolCall]:
    calls = []
    for tc in msg.get("tool_calls") or []:
        fn = tc.get("function") or {}
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except json.JSONDecodeError:
            args = {"__unparsed__": fn.get("arguments")}
        calls.append(ToolCall(tc.get("id") or uuid.uuid4().hex[:8], fn.get("name") or "",
                              args if isinstance(args, dict) else {"__unparsed__": args}))
    return calls


def _empty_at_cap(response: dict[str, Any]) -> bool:
    """A reply that stopped at its cap with neither content nor a tool call (a reasoning model that spent the
    cap thinking): nothing in it can be read as an answer."""
    choice = response["choices"][0]
    msg = choice["message"]
    return choice.get("finish_reason") == "length" and not (msg.get("content") or "").strip() \
        and not msg.get("tool_calls")


def _check_reply(response: dict[str, Any]) -> None:
    """A 200 reply that carries no usable completion is a fault to retry, not a crash further on."""
    choices = response.get("choices")
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise BadReply("empty_choices")
    msg = choices[0].get("message")
    if not isinstance(msg, dict):
        raise BadReply("null_message")
    calls = msg.get("tool_calls") or []
    if not isinstance(msg.get("content") or "", str) or not isinstance(calls, list) \
            or not all(isinstance(tc, dict) and isinstance(tc.get("function") or {}, dict) for tc in calls):
        raise BadReply("truncated_json")  # valid JSON, but not the shape of a chat completion
    try:  # a lone surrogate parses as JSON but can be neither logged nor stored
        json.dumps([msg.get("content"), [(tc.get("function") or {}).get("arguments") for tc in calls]],
                   ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise BadReply("invalid_utf8") from None


def retry_after(headers: Any) -> float | None:
    """Seconds a server asks to wait (Retry-After: seconds or an HTTP date; retry-after-ms), if it says."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


_LEDGER: Ledger | None = None


def use_ledger(ledger: Ledger | None) -> None:
    """The run ledger every client `session` and `LLMClient.connect` make in this process draws on from now on
    (pipeline.start_job: the job's run)."""
    global _LEDGER
    _LEDGER = ledger


def _run_ledger(cache: bool) -> Ledger | None:
    if _LEDGER is None or cache or not _LEDGER.cache:
        return _LEDGER
    return dataclasses.replace(_LEDGER, cache=False)


@contextmanager
def session(cfg: LLMConfig, workdir: str = ".", cache: bool = True) -> Iterator[LLMClient]:
    """A client for the shared server of this run, or, when none is exported (a cluster job, a script run
    by hand), for a server started for this job alone and stopped when the block ends. `cache` false: every
    request goes to the server (a study of the server's own cache), still within the run's dollar cap."""
    if cfg.base_url or os.environ.get(URL_ENV) or cfg.backend == "openai":
        yield LLMClient.connect(cfg, cache)
        return
    server = servers.start(cfg, workdir=workdir)
    try:
        yield LLMClient(cfg, server.url, ledger=_run_ledger(cache))
    finally:
        server.stop()
