"""A prefix-cache simulator that follows vLLM's block manager, and a llama.cpp single-slot model.

vLLM rules reproduced (FACTS.md, "vLLM facts"):
- the KV cache is a pool of `capacity_tokens // block_size` blocks;
- a block's hash chains its parent's hash and its own token ids, so a block is reusable only when every
  block before it is the same;
- only full blocks are cached, and the last prompt token is always recomputed: at most
  floor((n-1)/block_size) blocks of an n-token prompt hit;
- freed blocks join an LRU free queue; a finished request frees its blocks last-block-first, so its tail is
  evicted before its head; a cached block taken from the free queue by a hit leaves the queue;
- the scheduler serves running requests first; when a running request needs a block and none is free, the
  latest-arriving running request is preempted (its blocks freed) and recomputed later.

Time is coarser than vLLM's per-token iterations: one scheduler round admits waiting prompts whole (up to
`max_batched_tokens` of computed prompt tokens per round) and grows every running request by up to one block
of output. Preemption decisions can therefore shift by at most one block of output; cache hits do not.

Block hashes are computed with numpy (a mixed per-block content hash, chained by a position-weighted
running sum), deterministic across processes, unlike Python's salted `hash` that vLLM pins with
PYTHONHASHSEED.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

POLICIES = ("retain", "flush")
SCHEDULES = ("lockstep", "sequential")

_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_KEYS = np.random.Generator(np.random.PCG64(20261106)).integers(0, 2**63, size=4096, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
_POS = np.random.Generator(np.random.PCG64(16)).integers(0, 2**63, size=1 << 16, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise (uint64 arithmetic wraps, which is what we want)."""
    x = x ^ (x >> _S30)
    x = x * _C1
    x = x ^ (x >> _S27)
    x = x * _C2
    return x ^ (x >> _S31)


def _pos_weights(n: int) -> np.ndarray:
    global _POS
    if n > len(_POS):
        extra = np.random.Generator(np.random.PCG64(n)).integers(0, 2**63, size=n - len(_POS), dtype=np.uint64)
        _POS = np.concatenate([_POS, extra * np.uint64(2) + np.uint64(1)])
    return _POS[:n]


def block_hashes(token_ids: Sequence[int] | np.ndarray, block_size: int) -> list[int]:
    """Chained hashes of the full blocks of `token_ids` (a trailing partial block gets none).

    Hash i depends on blocks 0..i and on i itself, so two sequences share hash i only if they share their
    first (i+1)*block_size tokens (up to 64-bit collisions).
    """
    if block_size > len(_KEYS):
        raise ValueError(f"block_size {block_size} > {len(_KEYS)}")
    ids = np.asarray(token_ids)
    n = len(ids) // block_size
    if n == 0:
        return []
    m = ids[: n * block_size].astype(np.uint64).reshape(n, block_size)
    content = _mix(_mix(m ^ _KEYS[:block_size]).sum(axis=1, dtype=np.uint64))
    return _mix(np.cumsum(content * _pos_weights(n), dtype=np.uint64)).tolist()


@dataclass
class Request:
    """One prompt as the server received it. `response_token_ids`, when known, lets reply blocks be cached."""

    episode: str
    step: int
    token_ids: np.ndarray
    completion_tokens: int = 0
    response_token_ids: np.ndarray | None = None

    def __post_init__(self):
        self.token_ids = np.asarray(self.token_ids, dtype=np.int64)
        if self.response_token_ids is not None:
            self.response_token_ids = np.asarray(self.response_token_ids, dtype=np.int64)
            self.completion_tokens = len(self.response_token_ids)
        if len(self.token_ids) == 0:
            raise ValueError(f"episode {self.episode!r} step {self.step}: empty prompt")


@dataclass
class RequestResult:
    episode: str
    step: int
    prompt_tokens: int
    cached_tokens: int  # as the server reports it: the hit at the request's first scheduling
    recomputed_tokens: int  # prompt (and, after a preemption, earlier output) tokens computed, all admissions
    preemptions: int


@dataclass
class Summary:
    requests: int
    prompt_tokens: int
    cached_tokens: int
    reuse_ratio: float
    recomputed_tokens: int
    preemptions: int

    @classmethod
    def of(cls, results: Sequence[RequestResult]) -> "Summary":
        p = sum(r.prompt_tokens for r in results)
        c = sum(r.cached_tokens for r in results)
        return cls(len(results), p, c, round(c / p, 6) if p else 0.0,
                   sum(r.recomputed_tokens for r in results), sum(r.preemptions for r in results))


@dataclass
class CacheConfig:
    capacity_tokens: int
    block_size: int = 16
    policy: str = "retain"  # retain: vLLM's default; flush: cache emptied before every step (SkillRL's verl path)
    schedule: str = "lockstep"  # lockstep: requests of one step run together; sequential: one at a time
    max_num_seqs: int = 256  # vLLM's default --max-num-seqs
    max_batched_tokens: int = 8192  # computed prompt tokens admitted per scheduler round

    def __post_init__(self):
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if self.capacity_tokens < self.block_size:
            raise ValueError(f"capacity_tokens {self.capacity_tokens} is smaller than one block ({self.block_size})")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")


class BlockPool:
    """vLLM's block pool: ref counts, a hash -> block map, and an LRU free queue (head evicted first)."""

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.ref = [0] * num_blocks
        self.hash_of: list[int | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.evictions = 0

    def longest_hit(self, hashes: Sequence[int], max_blocks: int) -> list[int]:
        hit = []
        get = self.cached.get
        for h in hashes[:max_blocks]:
            b = get(h)
            if b is None:
                break
            hit.append(b)
        return hit

    def free_after_touch(self, hit: Sequence[int]) -> int:
        """Free blocks left once `hit` is taken out of the free queue."""
        ref = self.ref
        return len(self.free) - sum(1 for b in hit if ref[b] == 0)

    def touch(self, hit: Iterable[int]) -> None:
        ref, free = self.ref, self.free
        for b in hit:
            if ref[b] == 0:
                del free[b]
            ref[b] += 1

    def allocate(self, k: int) -> list[int]:
        out = []
        free, ref, hash_of, cached = self.free, self.ref, self.hash_of, self.cached
        for _ in range(k):
            b, _ = free.popitem(last=False)
            h = hash_of[b]
            if h is not None:
                # The block leaves the cache only now, when it is reused.
                if cached.get(h) == b:
                    del cached[h]
                hash_of[b] = None
                self.evictions += 1
            ref[b] = 1
            out.append(b)
        return out

    def register(self, blocks: Sequence[int], hashes: Sequence[int], start: int, stop: int) -> None:
        """Cache blocks[start:stop] under hashes[start:stop]; a hash already cached keeps its first block."""
        cached, hash_of = self.cached, self.hash_of
        for i in range(start, min(stop, len(hashes))):
            h = hashes[i]
            if h not in cached:
                cached[h] = blocks[i]
                hash_of[blocks[i]] = h

    def release(self, blocks: Sequence[int]) -> None:
        ref, free = self.ref, self.free
        for b in reversed(blocks):  # last block first: it is evicted first
            ref[b] -= 1
            if ref[b] == 0:
                free[b] = None

    def reset(self) -> None:
        """vLLM's reset_prefix_cache: drop every hash (only valid while no block is in use)."""
        if len(self.free) != self.num_blocks:
            raise RuntimeError("cannot reset the prefix cache while requests hold blocks")
        self.cached.clear()
        self.hash_of = [None] * self.num_blocks


class _State:
    __slots__ = ("req", "order", "hashes", "blocks", "tokens", "generated", "cached", "recomputed", "preemptions")

    def __init__(self, req: Request, order: int, block_size: int):
        self.req = req
        self.order = order
        seq = req.token_ids if req.response_token_ids is None else np.concatenate([req.token_ids, req.response_token_ids])
        self.hashes = block_hashes(seq, block_size)
        self.blocks: list[int] = []
        self.tokens = 0  # tokens whose KV is held
        self.generated = 0
        self.cached: int | None = None
        self.recomputed = 0
        self.preemptions = 0

    def result(self) -> RequestResult:
        r = self.req
        return RequestResult(str(r.episode), int(r.step), len(r.token_ids), self.cached or 0, self.recomputed,
                             self.preemptions)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class PrefixCacheSim:
    """Replays batches of requests through one vLLM-style block pool."""

    def __init__(self, cfg: CacheConfig):
        self.cfg = cfg
        self.pool = BlockPool(cfg.capacity_tokens // cfg.block_size)

    def run(self, requests: Iterable[Request]) -> list[RequestResult]:
        results: list[RequestResult] = []
        order = 0
        for batch in _batches(requests, self.cfg.schedule):
            if self.cfg.policy == "flush":
                self.pool.reset()
            states = []
            for r in batch:
                states.append(_State(r, order, self.cfg.block_size))
                order += 1
            self._run_batch(states)
            results.extend(s.result() for s in states)
        return results

    # -- one batch: all requests arrive together and run until every one has finished
    def _run_batch(self, states: list[_State]) -> None:
        waiting = deque(states)
        running: list[_State] = []
        while waiting or running:
            preempted = self._decode_round(running, waiting)
            if not preempted or not running:  # like vLLM, nothing new starts in a round that preempted
                self._admit(running, waiting)
            if waiting and not running:
                r = waiting[0].req
                raise ValueError(f"episode {r.episode!r} step {r.step}: needs more than the cache's "
                                 f"{self.cfg.capacity_tokens} tokens")

    def _admit(self, running: list[_State], waiting: deque) -> None:
        bs, pool = self.cfg.block_size, self.pool
        budget = self.cfg.max_batched_tokens
        first = True
        while waiting and len(running) < self.cfg.max_num_seqs:
            s = waiting[0]
            n = len(s.req.token_ids) + s.generated  # after a preemption the output so far is recomputed too
            hit = pool.longest_hit(s.hashes, (n - 1) // bs)
            compute = n - len(hit) * bs
            if compute > budget and not first:
                break
            need = _ceil_div(n, bs) - len(hit)
            if need > pool.free_after_touch(hit):
                break
            pool.touch(hit)
            s.blocks = hit + pool.allocate(need)
            pool.register(s.blocks, s.hashes, len(hit), n // bs)
            s.tokens = n
            if s.cached is None:
                s.cached = len(hit) * bs
            s.recomputed += compute
            budget -= compute
            first = False
            waiting.popleft()
            running.append(s)

    def _decode_round(self, running: list[_State], waiting: deque) -> bool:
        """Grow every running request by up to one block of output; True if anything was preempted."""
        bs, pool = self.cfg.block_size, self.pool
        preempted = False
        i = 0
        while i < len(running):
            s = running[i]
            grow = min(bs, s.req.completion_tokens - s.generated)
            new_tokens = s.tokens + grow
            need = _ceil_div(new_tokens, bs) - len(s.blocks)
            victim_is_self = False
            while need > len(pool.free):
                victim = running.pop()  # the latest arrival
                pool.release(victim.blocks)
                victim.blocks = []
                victim.tokens = 0
                victim.preemptions += 1
                waiting.appendleft(victim)
                preempted = True
                if victim is s:
                    victim_is_self = True
                    break
            if victim_is_self:
                break
            if need > 0:
                s.blocks += pool.allocate(need)
                pool.register(s.blocks, s.hashes, s.tokens // bs, new_tokens // bs)
            s.tokens = new_tokens
            s.generated += grow
            if s.generated >= s.req.completion_tokens:
                pool.release(s.blocks)
                s.blocks = []
                running.pop(i)
            else:
                i += 1
        return preempted


def _batches(requests: Iterable[Request], schedule: str) -> Iterable[list[Request]]:
    """Lockstep: all requests of one step form a batch (episodes advance together; within a step, file
    order is arrival order); sequential: every request is its own batch, in file order."""
    if schedule == "sequential":
        for r in requests:
            yield [r]
        return
    by_step: dict[int, list[Request]] = {}
    for r in requests:
        by_step.setdefault(int(r.step), []).append(r)
    for step in sorted(by_step):
        yield by_step[step]


def simulate(requests: Iterable[Request], cfg: CacheConfig) -> tuple[Summary, list[RequestResult]]:
    results = PrefixCacheSim(cfg).run(requests)
    return Summary.of(results), results


# -- llama.cpp ------------------------------------------------------------------------------------------


@dataclass
class LlamaCppConfig:
    slots: int = 1
    # llama.cpp's --slot-prompt-similarity: a slot is chosen for its cached prefix when the common prefix
    # covers at least this fraction of the new prompt; otherwise the least recently used slot is taken.
    slot_similarity: float = 0.5


@dataclass
class _Slot:
    tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    last_used: int = -1


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def simulate_llamacpp(requests: Iterable[Request], cfg: LlamaCppConfig | None = None) -> tuple[Summary, list[RequestResult]]:
    """llama.cpp's server cache: per slot, the previous prompt and its reply (less its last token) stay; a new prompt reuses its
    longest common prefix with them (token granularity, i.e. block size 1), minus the last prompt token,
    which is always evaluated. Requests run one at a time in the given order."""
    cfg = cfg or LlamaCppConfig()
    slots = [_Slot() for _ in range(cfg.slots)]
    results = []
    for t, r in enumerate(requests):
        prompt = r.token_ids
        lcps = [common_prefix(s.tokens, prompt) for s in slots]
        best = max(range(len(slots)), key=lambda i: lcps[i])
        if len(slots) > 1 and lcps[best] < cfg.slot_similarity * len(prompt):
            best = min(range(len(slots)), key=lambda i: slots[i].last_used)
        cached = min(lcps[best], len(prompt) - 1)
        slot = slots[best]
        reply = r.response_token_ids if r.response_token_ids is not None else np.zeros(0, dtype=np.int64)
        # The last sampled token is never evaluated, so its KV is not in the slot (measured: the server's
        # cache_n stops one token short of a prompt that repeats the whole reply).
        slot.tokens = np.concatenate([prompt, reply[:-1]])
        slot.last_used = t
        results.append(RequestResult(str(r.episode), int(r.step), len(prompt), cached, len(prompt) - cached, 0))
    return Summary.of(results), results


# -- request streams ------------------------------------------------------------------------------------


def read_requests(path: str, tokenizer=None) -> list[Request]:
    """Read a JSONL stream: each line has `episode`, `step` and `token_ids` or `text` (the whole prompt as
    sent, chat-template markers included; needs `tokenizer`). Optional: `completion_tokens`,
    `response_token_ids` or `response_text`."""
    import json

    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not JSON: {e}") from None
            if not isinstance(d, dict):
                raise ValueError(f"{where}: expected an object")
            for key in ("episode", "step"):
                if key not in d:
                    raise ValueError(f"{where}: missing key {key!r}")
            if not isinstance(d["step"], int) or isinstance(d["step"], bool):
                raise ValueError(f"{where}: 'step' must be an integer, got {d['step']!r}")
            if "token_ids" in d:
                ids = d["token_ids"]
                if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
                    raise ValueError(f"{where}: 'token_ids' must be a list of integers")
            elif "text" in d:
                if tokenizer is None:
                    raise ValueError(f"{where}: has 'text' but no tokenizer was given (--tokenizer)")
                ids = tokenizer.encode(d["text"])
            else:
                raise ValueError(f"{where}: needs 'token_ids' or 'text'")
            resp = d.get("response_token_ids")
            if resp is None and "response_text" in d and tokenizer is not None:
                resp = tokenizer.encode(d["response_text"])
            try:
                out.append(Request(str(d["episode"]), d["step"], np.asarray(ids, dtype=np.int64),
                                   int(d.get("completion_tokens", 0)),
                                   None if resp is None else np.asarray(resp, dtype=np.int64)))
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
    if not out:
        raise ValueError(f"{path}: no requests")
    return out


def results_table(results: Sequence[RequestResult]):
    import dataclasses

    import pyarrow as pa

    schema = pa.schema([("episode", pa.string()), ("step", pa.int64()), ("prompt_tokens", pa.int64()),
                        ("cached_tokens", pa.int64()), ("recomputed_tokens", pa.int64()), ("preemptions", pa.int64())])
    return pa.Table.from_pylist([dataclasses.asdict(r) for r in results], schema=schema)
