"""Teacher-forced scoring: the mean log-probability a model gives the actor's own tokens in a recorded
conversation (SkillScaffold's l(c; tau), seed 002 eq. 7).

Which tokens are scored is decided once, here, from the chat template: the assistant messages' bodies
(reasoning and action), never the system prompt, the observations or the template's markers. Both
backends receive the same token ids and the same positions:

- `TransformersScorer`: the GGUF model dequantised into transformers on the CPU; one forward pass per
  sequence, several sequences per batch (right-padded). Logits are computed only at scored positions, so
  memory does not grow with sequence length x vocabulary.
- `VLLMScorer`: a vLLM server's completions endpoint with `prompt_logprobs`, the token ids sent as the
  prompt. vLLM does not read the prefix cache for requests that ask for prompt log-probs, so every
  token of every sequence is recomputed; `n_forward_tokens` counts them.
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import gguf

from skillrepro.llm.models import MODELS, cache_dir, resolve


class ScoringError(ValueError):
    """A conversation the scorer cannot map onto tokens (template not prefix-consistent, no actor turn)."""


@dataclass(frozen=True)
class ScoringSequence:
    token_ids: tuple[int, ...]
    scored: tuple[int, ...]  # positions whose token is scored, each predicted from the tokens before it


@dataclass(frozen=True)
class TokenScore:
    n_tokens: int
    sum_logprob: float
    n_forward_tokens: int

    @property
    def mean_logprob(self) -> float:
        return self.sum_logprob / self.n_tokens if self.n_tokens else math.nan


class ChatSequencer:
    """Renders a conversation with the model's chat template and marks the actor's tokens.

    Assistant message i spans from the end of the prompt rendered for it (messages before it plus the
    generation prompt) to the start of the template's end-of-turn text. A token is scored when its first
    character lies in such a span."""

    def __init__(self, tokenizer: Any):
        if not getattr(tokenizer, "chat_template", None):
            raise ScoringError("the tokenizer has no chat template; the scorer needs one to find the actor's tokens")
        self.tok = tokenizer
        probe = [{"role": "user", "content": "u"}]
        head = self._render(probe, True)
        full = self._render(probe + [{"role": "assistant", "content": "XYZ"}], False)
        if not full.startswith(head) or not full[len(head):].startswith("XYZ"):
            raise ScoringError("the chat template does not render an assistant turn right after its generation prompt")
        self.end_of_turn = full[len(head) + 3:]

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    def spans(self, messages: Sequence[dict[str, Any]]) -> tuple[str, list[tuple[int, int]]]:
        """The rendered conversation and the character spans of its assistant bodies."""
        messages = list(messages)
        text = self._render(messages, False)
        spans = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            head = self._render(messages[:i], True)
            upto = self._render(messages[: i + 1], False)
            if not text.startswith(upto) or not upto.startswith(head):
                raise ScoringError(f"the chat template is not prefix-consistent at message {i}; cannot locate its tokens")
            end = len(upto) - len(self.end_of_turn) if upto.endswith(self.end_of_turn) else len(upto)
            spans.append((len(head), end))
        if not spans:
            raise ScoringError("the conversation has no assistant message to score")
        return text, spans

    def build(self, messages: Sequence[dict[str, Any]]) -> ScoringSequence:
        text, spans = self.spans(messages)
        enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
        scored = []
        k = 0
        for pos, (start, end) in enumerate(offsets):
            while k < len(spans) and start >= spans[k][1]:
                k += 1
            if k < len(spans) and spans[k][0] <= start < spans[k][1] and end > start and pos > 0:
                scored.append(pos)
        if not scored:
            raise ScoringError("the assistant messages are empty: no token to score")
        return ScoringSequence(tuple(ids), tuple(scored))


class Scorer(Protocol):
    name: str
    model: str
    sequencer: ChatSequencer

    def score_sequences(self, seqs: Sequence[ScoringSequence],
                        on_scored: Callable[[int], None] | None = None) -> list[TokenScore]: ...


def score_conversations(scorer: Scorer, conversations: Sequence[Sequence[dict[str, Any]]],
                        on_scored: Callable[[int], None] | None = None) -> list[TokenScore]:
    """`on_scored(n)`: called as each batch's n sequences are scored (a job's progress on the console).

    A conversation that occurs more than once (one Scout under two identical cards) is scored once: its repeats
    get the same score with no forward tokens of their own (`n_forward_tokens` counts what was computed)."""
    import dataclasses

    seqs = [scorer.sequencer.build(c) for c in conversations]
    unique = list(dict.fromkeys(seqs))
    scores = dict(zip(unique, scorer.score_sequences(unique, on_scored)))
    if on_scored and len(unique) < len(seqs):
        on_scored(len(seqs) - len(unique))
    out = []
    for s in seqs:
        out.append(scores[s])
        scores[s] = dataclasses.replace(scores[s], n_forward_tokens=0)  # its repeats computed nothing
    return out


def load_gguf(gguf_path: str | Path, tokenizer_only: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer) of a GGUF file, the weights dequantised to float32 (model None with
    `tokenizer_only`). transformers reads a GGUF's metadata in pure Python, twice per load: about 25 s for
    SmolLM2-135M on 2 cores, most of it the vocabulary, in every job that loads it. So a shipped model (a
    file in models.cache_dir()) is converted once into a plain Hugging Face folder beside it, which loads in
    a second or two; any other file (a checkpoint written under results/) is read directly."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(gguf_path)
    if p.resolve().parent != cache_dir().resolve():
        return _read_gguf(p, tokenizer_only)
    folder = _converted(p)
    tok = AutoTokenizer.from_pretrained(str(folder))
    return (None if tokenizer_only else AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)), tok


def _read_gguf(p: Path, tokenizer_only: bool = False) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _parsed_once(p):
        tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
        if tokenizer_only:
            return None, tok
        lm = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32)
    # The weights are dequantised into plain tensors; the quantizer marker left on the model would make
    # the Trainer refuse to train it (and would be saved into a converted folder's config).
    if getattr(lm, "hf_quantizer", None) is not None:
        lm.hf_quantizer.remove_quantization_config(lm)
    lm.is_quantized = False
    return lm, tok


@contextlib.contextmanager
def _parsed_once(p: Path):
    """Within the block, gguf-py parses `p` once and builds each tensor-name map once. transformers asks it to
    parse the file's metadata three times per load (config, tokenizer, weights: about 4 s each for SmolLM2-135M's
    vocabulary, in pure Python) and to rebuild the name map for every module (about 7 s); both are read-only
    after they are built. transformers imports both names from gguf at each call, so replacing them on the module
    reaches it; anything else is passed to the originals."""
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    reader = reader_class(str(p))

    def one_reader(path, *args, **kwargs):
        return reader if Path(path) == p and not args and not kwargs else reader_class(path, *args, **kwargs)

    gguf.GGUFReader, gguf.get_tensor_name_map = one_reader, functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map


def _converted(p: Path) -> Path:
    """The Hugging Face folder of shipped GGUF file `p`, made on first use. Keyed by the file's size and
    mtime (a replaced file is converted again); written under a temporary name and renamed, so that two
    jobs converting at once never read a half-written folder."""
    import os
    import shutil

    st = p.stat()
    folder = p.parent / "hf" / f"{p.stem}-{st.st_size}-{st.st_mtime_ns}"
    if folder.is_dir():
        return folder
    lm, tok = _read_gguf(p)
    tmp = folder.with_name(f"{folder.name}.part{os.getpid()}")
    lm.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        tmp.rename(folder)
    except OSError:  # another job renamed its own copy first
        shutil.rmtree(tmp)
    return folder


def load_gguf_tokenizer(gguf_path: str | Path):
    return load_gguf(gguf_path, tokenizer_only=True)[1]


def hf_tokenizer(model: str) -> Any:
    """The Hugging Face tokenizer of `model` as vLLM serves it: a shipped model's from its GGUF file, the one its
    vLLM folder is made from (its hub id is only the name it is served under, and nothing here reaches the hub);
    any other model's from its own folder or hub id."""
    from transformers import AutoTokenizer  # lazy: transformers takes seconds to import

    return load_gguf_tokenizer(resolve(model)) if model in MODELS else AutoTokenizer.from_pretrained(model)


class TransformersScorer:
    """Exact teacher-forced scores on the CPU from a GGUF file (dequantised to float32)."""

    name = "transformers"

    def __init__(self, gguf_path: str | Path, *, batch_tokens: int = 8192, threads: int | None = None,
                 model_name: str | None = None, weights: tuple[Any, Any] | None = None):
        """`weights`: (model, tokenizer) already loaded with the numbers `gguf_path` holds, read another way."""
        import torch

        if threads:
            torch.set_num_threads(threads)
        p = Path(gguf_path)
        self.model = model_name or p.name
        self.lm, self.tokenizer = weights or load_gguf(p)
        self.sequencer = ChatSequencer(self.tokenizer)
        self.lm.eval()
        self.batch_tokens = batch_tokens
        self._check_head()

    def _check_head(self) -> None:
        """The shortcut (base model, then the output head at chosen positions) must equal the full
        model's logits; architectures with extra logit processing would break it."""
        import torch

        ids = torch.tensor([self.tokenizer("The scorer checks its own head.")["input_ids"]])
        with torch.inference_mode():
            full = self.lm(input_ids=ids).logits[0].float()
            mine = self.lm.get_output_embeddings()(self.lm.base_model(input_ids=ids).last_hidden_state[0]).float()
        if (full - mine).abs().max().item() > 1e-4:
            raise ScoringError(f"model {self.model}: logits differ from the output head's; this architecture "
                               "post-processes logits and the CPU scorer does not support it")

    def score_sequences(self, seqs: Sequence[ScoringSequence],
                        on_scored: Callable[[int], None] | None = None) -> list[TokenScore]:
        import torch

        order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i].token_ids))
        out: list[TokenScore | None] = [None] * len(seqs)
        i = 0
        while i < len(order):
            width = len(seqs[order[i]].token_ids)  # longest first: the first of a batch sets its width
            n = max(1, min(len(order) - i, self.batch_tokens // max(width, 1)))
            batch = order[i:i + n]
            ids = torch.zeros((n, width), dtype=torch.long)
            mask = torch.zeros((n, width), dtype=torch.long)
            rows, cols, targets = [], [], []
            for r, k in enumerate(batch):
                t = seqs[k].token_ids
                ids[r, :len(t)] = torch.tensor(t)
                mask[r, :len(t)] = 1
                for pos in seqs[k].scored:
                    rows.append(r)
                    cols.append(pos - 1)  # the logits at pos-1 predict the token at pos
                    targets.append(t[pos])
            with torch.inference_mode():
                hidden = self.lm.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
                logits = self.lm.get_output_embeddings()(hidden[torch.tensor(rows), torch.tensor(cols)]).float()
                lp = torch.log_softmax(logits, dim=-1)[torch.arange(len(targets)), torch.tensor(targets)]
            row_sums = torch.zeros(n, dtype=torch.float64).index_add_(0, torch.tensor(rows), lp.double())
            for r, k in enumerate(batch):
                out[k] = TokenScore(len(seqs[k].scored), float(row_sums[r]), len(seqs[k].token_ids))
            i += n
            if on_scored:
                on_scored(n)
        return out  # type: ignore[return-value]


class VLLMScorer:
    """Teacher-forced scores from a vLLM server (`prompt_logprobs` on /v1/completions, token ids as prompt)."""

    name = "vllm"

    def __init__(self, base_url: str, model: str, tokenizer: Any, *, timeout_s: float = 600, api_key: str = "none"):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.tokenizer = tokenizer
        self.sequencer = ChatSequencer(tokenizer)
        self.timeout_s = timeout_s
        self.api_key = api_key

    def request_body(self, seq: ScoringSequence) -> dict[str, Any]:
        # max_tokens=1: vLLM must sample something; the one sampled token is ignored.
        return {"model": self.model, "prompt": list(seq.token_ids), "max_tokens": 1, "temperature": 0.0,
                "prompt_logprobs": 1}

    @staticmethod
    def parse(response: dict[str, Any], seq: ScoringSequence) -> TokenScore:
        plp = response["choices"][0].get("prompt_logprobs")
        if plp is None or len(plp) != len(seq.token_ids):
            raise ScoringError(f"vLLM returned {0 if plp is None else len(plp)} prompt log-probs for "
                               f"{len(seq.token_ids)} prompt tokens")
        total = 0.0
        for pos in seq.scored:
            entry = plp[pos] or {}
            hit = entry.get(str(seq.token_ids[pos]))
            if hit is None:
                raise ScoringError(f"vLLM gave no log-prob for prompt token {seq.token_ids[pos]} at position {pos}")
            total += float(hit["logprob"] if isinstance(hit, dict) else hit)
        return TokenScore(len(seq.scored), total, len(seq.token_ids))

    def score_sequences(self, seqs: Sequence[ScoringSequence],
                        on_scored: Callable[[int], None] | None = None) -> list[TokenScore]:
        out = []
        for seq in seqs:
            req = urllib.request.Request(
                self.base_url + "/completions", data=json.dumps(self.request_body(seq)).encode(),
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"})
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                out.append(self.parse(json.loads(r.read()), seq))
            if on_scored:
                on_scored(1)
        return out
