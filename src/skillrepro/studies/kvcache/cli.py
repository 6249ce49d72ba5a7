"""`skillrepro kvcache ...`: replay a request stream through the prefix-cache simulator."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from skillrepro.store import write_table
from skillrepro.studies.kvcache import sim
from skillrepro.studies.kvcache.tokenizers import get_tokenizer


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("kvcache")  # its help: skillrepro.cli.COMMANDS
    ksub = p.add_subparsers(dest="kvcache_command", required=True)
    s = ksub.add_parser("simulate", help="replay a JSONL request stream through a vLLM-style prefix cache")
    s.add_argument("--requests", required=True, help="JSONL: episode, step, token_ids or text per line")
    s.add_argument("--tokenizer", help="qwen2.5 | server | server:URL (needed when lines hold text)")
    s.add_argument("--block-size", type=int, default=16)
    s.add_argument("--capacity-tokens", type=int, required=True)
    s.add_argument("--policy", choices=("retain", "flush"), default="retain")
    s.add_argument("--schedule", choices=("lockstep", "sequential"), default="lockstep",
                   help="lockstep: every episode's request of a step runs together (default)")
    s.add_argument("--engine", choices=("vllm", "llamacpp"), default="vllm",
                   help="llamacpp: token-level reuse of each slot's previous prompt and reply")
    s.add_argument("--slots", type=int, default=1, help="llamacpp engine: number of slots")
    s.add_argument("--max-num-seqs", type=int, default=1024,
                   help="vLLM --max-num-seqs (0.11.0's default for `vllm serve` on an H100-class GPU: 1024)")
    s.add_argument("--max-num-batched-tokens", "--max-batched-tokens", dest="max_batched_tokens", type=int, default=8192,
                   help="vLLM's --max-num-batched-tokens: tokens per scheduler step (0.11.0, H100-class: 8192); "
                        "--max-batched-tokens is the old spelling")
    s.add_argument("--vllm-version", choices=sim.VLLM_VERSIONS, default=sim.VLLM_VERSION,
                   help="whose scheduler and block pool to follow: 0.11.0 (default, the seminar's pin) or 0.33.0 "
                        "(what `pip install vllm` gives; differences in sim.py's docstring and docs/deviations.md)")
    s.add_argument("--vocab-size", type=int,
                   help="token ids must lie below it (default: the tokenizer's vocabulary, else 2**63)")
    s.add_argument("--out", required=True, help="folder for per_request.parquet")
    s.set_defaults(func=_simulate)


def _check_args(a: argparse.Namespace) -> None:
    """Every option a user can get wrong, before any work starts."""
    for opt in ("block_size", "capacity_tokens", "max_num_seqs", "max_batched_tokens", "slots", "vocab_size"):
        v = getattr(a, opt)
        if v is not None and v < 1:
            flag = "--max-num-batched-tokens" if opt == "max_batched_tokens" else f"--{opt.replace('_', '-')}"
            raise ValueError(f"{flag} must be >= 1, got {v}")
    out = Path(a.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise ValueError(f"--out {a.out}: cannot be written ({e.strerror or e})") from None


def _simulate(a: argparse.Namespace) -> int:
    try:
        _check_args(a)
        tok = get_tokenizer(a.tokenizer) if a.tokenizer else None
        vocab = a.vocab_size or getattr(tok, "n_vocab", None) or sim.MAX_TOKEN_ID
        reqs = sim.read_requests(a.requests, tok, vocab)
        if a.engine == "llamacpp":
            summary, results = sim.simulate_llamacpp(reqs, sim.LlamaCppConfig(slots=a.slots))
        else:
            cfg = sim.CacheConfig(capacity_tokens=a.capacity_tokens, block_size=a.block_size, policy=a.policy,
                                  schedule=a.schedule, max_num_seqs=a.max_num_seqs,
                                  max_batched_tokens=a.max_batched_tokens, vllm_version=a.vllm_version)
            summary, results = sim.simulate(reqs, cfg)
    except (ValueError, OSError) as e:
        print(f"skillrepro kvcache simulate: error: {e}", file=sys.stderr)
        return 2
    write_table(Path(a.out) / "per_request.parquet", sim.results_table(results))
    engine = {"engine": "llamacpp"} if a.engine == "llamacpp" else {"engine": "vllm", "vllm_version": a.vllm_version}
    print(json.dumps({**engine, **dataclasses.asdict(summary)}))
    return 0
