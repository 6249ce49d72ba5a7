"""The served model's own tokenizer over HTTP: llama.cpp's and vLLM's `/tokenize` (and llama.cpp's
`/apply-template`), written once here for the client's token counts, the KV-cache study's token ids and the
Generator's card budget.

Light on purpose (json and urllib only): `skillrepro kvcache simulate` imports it, and a command's start-up is
part of what it costs. A request's errors (OSError, a reply that is not JSON or lacks its field) reach the caller,
which names what it was doing.
"""
from __future__ import annotations

import json
import urllib.request
from typing import Any


def server_root(base_url: str) -> str:
    """The server's address without its OpenAI-compatible /v1."""
    return base_url.rstrip("/").removesuffix("/v1")


def post_json(url: str, body: dict[str, Any], timeout_s: float) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        return json.load(r)


def tokenize(root: str, backend: str, *, text: str | None = None, messages: list[dict] | None = None,
             model: str = "", add_special: bool = False, parse_special: bool | None = None,
             tools: list[dict] | None = None, timeout_s: float = 60.0) -> list[int]:
    """The token ids of `text`, or of `messages` with the chat template and the generation prompt applied, as the
    server at `root` computes them. `backend`: "embedded" (llama.cpp) or "vllm".

    `add_special` adds the model's BOS/EOS to the text (for `messages` on llama.cpp: to the templated prompt);
    `parse_special` (llama.cpp) reads special-token text such as `<|im_start|>` as those tokens, None leaving it
    to the server's default. `tools` (vLLM, with `messages`): tool schemas the chat template writes into the
    prompt. A token llama.cpp gives as {"id", "piece"} counts by its id."""
    if (text is None) == (messages is None):
        raise ValueError("tokenize: give text or messages, not both")
    if backend == "embedded":
        if messages is not None:
            text = post_json(root + "/apply-template", {"messages": messages}, timeout_s)["prompt"]
        body: dict[str, Any] = {"content": text, "add_special": add_special}
        if parse_special is not None:
            body["parse_special"] = parse_special
        return [t if isinstance(t, int) else t["id"] for t in post_json(root + "/tokenize", body, timeout_s)["tokens"]]
    if backend == "vllm":
        body = ({"model": model, "messages": messages, "add_generation_prompt": True} if messages is not None
                else {"model": model, "prompt": text, "add_special_tokens": add_special})
        if tools and messages is not None:
            body["tools"] = tools
        return list(post_json(root + "/tokenize", body, timeout_s)["tokens"])
    raise ValueError(f"llm.backend {backend!r} has no /tokenize (embedded or vllm have one)")
