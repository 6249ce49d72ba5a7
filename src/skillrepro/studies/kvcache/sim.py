"""A prefix-cache simulator that follows vLLM V1's scheduler and block manager, and a llama.cpp slot model.

Long because it models two engines (vLLM's scheduler and block pool in two versions, llama.cpp's slots) over one request type and one result type.

Follows vLLM 0.11.0 by default (`VLLM_VERSION`, the seminar's and SkillRL's pin); `CacheConfig.vllm_version`
"0.33.0" (what `pip install vllm` gives in December 2026) switches on the four differences of 0.33.0's
`v1/core` that can change a number here, listed after the 0.11.0 rules. Each rule below is what 0.11.0's
`v1/core` does (block_pool, kv_cache_manager, single_type_kv_cache_manager, kv_cache_utils, sched/scheduler),
re-implemented here:
- the pool has `capacity_tokens // block_size` blocks, `capacity_tokens` being the "GPU KV cache size" vLLM
  logs; block 0 is the reserved null block, so one block fewer is usable;
- a block's hash chains its parent's hash and its own token ids; only full blocks are cached; a lookup stops
  one token short of the request (`max_cache_hit_length = num_tokens - 1`), so at most
  floor((n-1)/block_size) blocks of an n-token request hit;
- blocks are cached when they are allocated for tokens being scheduled; two requests that compute the same
  block each keep their copy (no deduplication): both copies stay cached and a lookup takes the first;
- freed blocks join an LRU free queue (a request frees its blocks last-block-first); a cached block leaves
  the cache only when the free queue hands it out again;
- one scheduler step has `max_num_batched_tokens` tokens: running requests first, in admission order, each
  taking its remaining prefill (chunked by the budget) or one decode token; a running request that cannot
  get a block preempts the most recently admitted running request (blocks freed, requeued at the front of
  the waiting queue, recomputed from scratch later, prefix hits allowed) until it fits or is itself the
  victim; waiting requests are admitted only in a step that preempted nothing, while the budget lasts and
  fewer than `max_num_seqs` run;
- a request whose prefill completes samples its first token; each decode step samples one more; the final
  sampled token never gets KV, so a request with c completion tokens holds p + c - 1 tokens at most;
- vLLM's prefix-cache counters count every lookup, including a blocked head of the queue that is looked up
  again each step (`prefix_cache_queries`, `prefix_cache_hits`);
- a request that cannot fit even alone (p + c - 1 tokens > usable blocks) is rejected before anything runs,
  as vLLM's server rejects it (its max_model_len never exceeds the KV cache).

0.33.0 (read from its sdist's v1/core, block_pool.free_blocks, kv_cache_manager.allocate_slots and
record_prefix_cache_stats, sched/scheduler.schedule, config/scheduler.py and config/vllm.py) differs in:
- freeing: a freed block without a hash (a request's partial last block; 0.33.0's `free_blocks` calls them
  "never match APC") goes to the head of the free queue, to be handed out first; hashed blocks join the
  tail as before (0.11.0 appends every freed block to the tail);
- admission (`scheduler_reserve_full_isl`, on by default): a waiting request is admitted only if the free
  queue holds blocks for its whole sequence (less its hit), not just for this step's chunk;
- counters: `prefix_cache_queries` / `prefix_cache_hits` are recorded when a request is admitted (a blocked
  head looked up again each step is not counted) and leave out requests that were preempted before (0.33.0
  counts those apart, as preempted queries and hits, kept here in `preempted_queries` / `preempted_hits`);
- async scheduling (on by default; 0.11.0: off): step t+1 is scheduled before step t's output is read, so a
  request that stops (EOS or a stop string) is scheduled for one more token, which can take a new block, and
  frees its blocks one step later; a request that stops at max_tokens is not (0.33.0 skips it). Replies are
  taken to stop on their own (`Request.stopped_at_max_tokens` False).
What 0.33.0 also changed and changes no number here: block hashing (sha256 by default; only equality
matters), sub-block ("partial") hits, which only hybrid/Mamba models use (a single full-attention group
asserts hash block size = block size), the watermark (default 0), the per-request cached_tokens (still the
hit at the first scheduling) and the H100-class defaults (still 8192 / 1024). Decode blocks are cached one
step later under async scheduling, which no lookup here can see: a step's next prompts arrive after every
reply of the step.

Defaults are 0.11.0's (and 0.33.0's) for `vllm serve` on a GPU with >= 70 GiB that is not an A100 (the
seminar's H100): max_num_batched_tokens 8192 and max_num_seqs 1024.

The simulator's own choices: requests of one `step` arrive together and run until all finish before the
next step's requests arrive (an agent's next prompt needs the reply); steps in which nothing but
block-interior decoding happens are fast-forwarded (exact: nothing the scheduler reads changes in them).

Block hashes are computed with numpy (a mixed per-block content hash, chained by a position-weighted
running sum), deterministic across processes, unlike Python's salted `hash` that vLLM pins with
PYTHONHASHSEED.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa

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
    stopped_at_max_tokens: bool = False  # 0.33.0's async scheduler schedules no extra token for such a reply

    def __post_init__(self):
        self.token_ids = np.asarray(self.token_ids, dtype=np.int64)
        if self.response_token_ids is not None:
            self.response_token_ids = np.asarray(self.response_token_ids, dtype=np.int64)
            self.completion_tokens = len(self.response_token_ids)
        if len(self.token_ids) == 0:
            raise ValueError(f"episode {self.episode!r} step {self.step}: empty prompt")
        if self.completion_tokens < 0:
            raise ValueError(f"episode {self.episode!r} step {self.step}: completion_tokens must be >= 0")

    @property
    def output_tokens(self) -> int:
        """Tokens vLLM samples: at least one (a request always samples after its prefill)."""
        return max(self.completion_tokens, 1)


@dataclass
class RequestResult:
    episode: str
    step: int
    prompt_tokens: int
    cached_tokens: int  # as the server reports it: the hit at the request's first scheduling
    recomputed_tokens: int  # tokens computed beyond the decode of an undisturbed run: prompt less the hit,
    # plus, after each preemption, everything recomputed
    preemptions: int


@dataclass
class Summary:
    requests: int
    prompt_tokens: int
    cached_tokens: int
    reuse_ratio: float
    recomputed_tokens: int
    preemptions: int
    # vLLM's own counters (vllm:prefix_cache_queries / _hits): 0.11.0 counts every lookup, re-admissions
    # included; 0.33.0 counts admissions of never-preempted requests, the others in preempted_*
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0

    @classmethod
    def of(cls, results: Sequence[RequestResult], queries: int = 0, hits: int = 0, preempted_queries: int = 0,
           preempted_hits: int = 0) -> "Summary":
        p = sum(r.prompt_tokens for r in results)
        c = sum(r.cached_tokens for r in results)
        return cls(len(results), p, c, round(c / p, 6) if p else 0.0,
                   sum(r.recomputed_tokens for r in results), sum(r.preemptions for r in results), queries, hits,
                   preempted_queries, preempted_hits)


VLLM_VERSION = "0.11.0"  # the default: the seminar's and SkillRL's pin
VLLM_VERSIONS = ("0.11.0", "0.33.0")
# 0.11.0's defaults for `vllm serve` on a >= 70 GiB GPU that is not an A100 (engine/arg_utils.py)
DEFAULT_MAX_NUM_SEQS = 1024
DEFAULT_MAX_BATCHED_TOKENS = 8192


@dataclass
class CacheConfig:
    capacity_tokens: int  # vLLM's logged "GPU KV cache size": every block, the null block included
    block_size: int = 16
    policy: str = "retain"  # retain: vLLM's default; flush: cache emptied before every step (SkillRL's verl path)
    schedule: str = "lockstep"  # lockstep: requests of one step run together; sequential: one at a time
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_batched_tokens: int = DEFAULT_MAX_BATCHED_TOKENS  # tokens per scheduler step, prefill and decode
    vllm_version: str = VLLM_VERSION  # whose scheduler and block pool (module docstring: what differs)

    def __post_init__(self):
        if self.vllm_version not in VLLM_VERSIONS:
            raise ValueError(f"vllm_version must be one of {', '.join(VLLM_VERSIONS)}, got {self.vllm_version!r}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if self.capacity_tokens < 2 * self.block_size:
            raise ValueError(f"capacity_tokens {self.capacity_tokens} is smaller than two blocks (one is the "
                             f"reserved null block) of {self.block_size}")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_batched_tokens < 1:
            raise ValueError(f"max_batched_tokens must be >= 1, got {self.max_batched_tokens}")

    @property
    def usable_blocks(self) -> int:
        return self.capacity_tokens // self.block_size - 1

    @property
    def newer(self) -> bool:
        """0.33.0's rules (free order, full-sequence admission, admission-time counters, async scheduling)."""
        return self.vllm_version != "0.11.0"


class BlockPool:
    """vLLM's block pool: block 0 reserved (null), ref counts, hash -> {block} (duplicates kept, the first
    one answers a lookup), and an LRU free queue (head handed out first)."""

    def __init__(self, num_blocks: int, hashless_first: bool = False):
        self.num_blocks = num_blocks
        self.hashless_first = hashless_first  # 0.33.0: freed blocks without a hash go to the head
        self.ref = [0] * num_blocks
        self.hash_of: list[int | None] = [None] * num_blocks
        self.cached: dict[int, dict[int, None]] = {}
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))  # 0 is the null block
        self.evictions = 0

    def longest_hit(self, hashes: Sequence[int], max_blocks: int) -> list[int]:
        hit = []
        get = self.cached.get
        for h in hashes[:max_blocks]:
            copies = get(h)
            if copies is None:
                break
            hit.append(next(iter(copies)))
        return hit

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
                # The block leaves the cache only now, when it is handed out again; other copies stay.
                copies = cached[h]
                del copies[b]
                if not copies:
                    del cached[h]
                hash_of[b] = None
                self.evictions += 1
            ref[b] = 1
            out.append(b)
        return out

    def register(self, blocks: Sequence[int], hashes: Sequence[int], start: int, stop: int) -> None:
        """Cache blocks[start:stop] under hashes[start:stop]; a hash already cached gains one more copy."""
        cached, hash_of = self.cached, self.hash_of
        for i in range(start, min(stop, len(hashes))):
            b = blocks[i]
            if hash_of[b] is None:  # a hit block is registered already
                h = hashes[i]
                cached.setdefault(h, {})[b] = None
                hash_of[b] = h

    def release(self, blocks: Sequence[int]) -> None:
        ref, free = self.ref, self.free
        first = []
        for b in reversed(blocks):  # last block first: it is evicted first
            ref[b] -= 1
            if ref[b] == 0:
                # (a full reply block is hash-less here only when the stream lacks the reply's ids)
                if self.hashless_first and self.hash_of[b] is None:
                    first.append(b)
                else:
                    free[b] = None
        for b in reversed(first):  # 0.33.0's prepend_n keeps their order at the head
            free[b] = None
            free.move_to_end(b, last=False)

    def reset(self) -> None:
        """vLLM's reset_prefix_cache: drop every hash (only valid while no block is in use)."""
        if len(self.free) != self.num_blocks - 1:
            raise RuntimeError("cannot reset the prefix cache while requests hold blocks")
        self.cached.clear()
        self.hash_of = [None] * self.num_blocks


class _State:
    __slots__ = ("req", "hashes", "blocks", "num_tokens", "computed", "generated", "max_out", "cached",
                 "computed_total", "preemptions", "new", "ending")

    def __init__(self, req: Request, block_size: int):
        self.req = req
        seq = req.token_ids if req.response_token_ids is None else np.concatenate([req.token_ids, req.response_token_ids])
        self.hashes = block_hashes(seq, block_size)
        self.blocks: list[int] = []
        self.num_tokens = len(req.token_ids)  # prompt + tokens sampled so far
        self.computed = 0  # tokens whose KV is held
        self.generated = 0
        self.max_out = req.output_tokens
        self.cached: int | None = None
        self.computed_total = 0
        self.preemptions = 0
        self.new = 0  # tokens scheduled in the current step
        self.ending = False  # async scheduling: finished, its stop not yet read by the scheduler

    def result(self) -> RequestResult:
        r = self.req
        recomputed = self.computed_total - (self.max_out - 1)  # less the decode of an undisturbed run
        return RequestResult(str(r.episode), int(r.step), len(r.token_ids), self.cached or 0, recomputed,
                             self.preemptions)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class PrefixCacheSim:
    """Replays batches of requests through one vLLM V1 scheduler and block pool."""

    def __init__(self, cfg: CacheConfig, *, fast_forward: bool = True, trace: bool = False):
        self.cfg = cfg
        self.pool = BlockPool(cfg.capacity_tokens // cfg.block_size, hashless_first=cfg.newer)
        self.queries = 0
        self.hits = 0
        self.preempted_queries = 0
        self.preempted_hits = 0
        self.steps = 0
        self.fast_forward = fast_forward
        # with trace: one entry per scheduler step, [(episode, step, tokens scheduled)] in schedule order
        self.trace: list[list[tuple[str, int, int]]] | None = [] if trace else None

    def check_fits(self, requests: Sequence[Request]) -> None:
        """vLLM's server rejects a request longer than its max_model_len, which never exceeds the KV cache."""
        bs, usable = self.cfg.block_size, self.cfg.usable_blocks
        for r in requests:
            n = len(r.token_ids) + r.output_tokens - 1
            if _ceil_div(n, bs) > usable:
                raise ValueError(
                    f"episode {r.episode!r} step {r.step}: prompt + completion need {n} tokens of KV, more than "
                    f"the {usable * bs} usable tokens of a {self.cfg.capacity_tokens}-token cache; vLLM "
                    f"{VLLM_VERSION} rejects such a request (its max_model_len cannot exceed the KV cache)")

    def run(self, requests: Iterable[Request]) -> list[RequestResult]:
        requests = list(requests)
        self.check_fits(requests)
        results: list[RequestResult] = []
        for batch in batches(requests, self.cfg.schedule):
            if self.cfg.policy == "flush":
                self.pool.reset()
            states = [_State(r, self.cfg.block_size) for r in batch]
            self._run_batch(states)
            results.extend(s.result() for s in states)
        return results

    def summary(self, results: Sequence[RequestResult]) -> Summary:
        return Summary.of(results, self.queries, self.hits, self.preempted_queries, self.preempted_hits)

    # -- one batch: all requests arrive together; scheduler steps until every one has finished
    def _run_batch(self, states: list[_State]) -> None:
        waiting = deque(states)
        running: list[_State] = []
        while waiting or running:
            if self.fast_forward:
                self._fast_forward(running, waiting)
            scheduled = self._step(running, waiting)
            self.steps += 1
            if self.trace is not None:
                self.trace.append([(s.req.episode, s.req.step, s.new) for s in scheduled])
            if not scheduled:  # cannot happen once check_fits passed; guards the loop all the same
                raise RuntimeError("scheduler step scheduled nothing; the simulator would loop forever")
            self._update(running, scheduled)

    def _lookup(self, s: _State) -> list[int]:
        return self.pool.longest_hit(s.hashes, (s.num_tokens - 1) // self.cfg.block_size)

    def _admission_need(self, s: _State, hit: list[int], budget: int) -> tuple[int, int, int]:
        """For a waiting request: tokens to compute this step, new blocks, and blocks it takes out of the
        free queue (the new ones plus hit blocks sitting there, as vLLM counts them)."""
        bs, ref = self.cfg.block_size, self.pool.ref
        computed = len(hit) * bs
        new = min(s.num_tokens - computed, budget)
        fresh = _ceil_div(computed + new, bs) - len(hit)
        evictable = sum(1 for b in hit if ref[b] == 0)
        if self.cfg.newer:  # scheduler_reserve_full_isl: the whole sequence must fit, not only this chunk
            return new, fresh, _ceil_div(s.num_tokens, bs) - len(hit) + evictable
        return new, fresh, fresh + evictable

    def _step(self, running: list[_State], waiting: deque) -> list[_State]:
        bs, pool, cfg = self.cfg.block_size, self.pool, self.cfg
        budget = cfg.max_batched_tokens
        scheduled: list[_State] = []
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            s = running[i]
            c = s.computed
            new = s.num_tokens - c  # the rest of a (re)prefill, or 1 when decoding
            if s.ending:  # async: the finished request's stop is unread, so its last token is scheduled too
                new = 1
            if new > budget:
                new = budget
            end = c + new
            need = _ceil_div(end, bs) - len(s.blocks)
            if need > 0:
                victim = None
                while need > len(pool.free):
                    victim = running.pop()  # the most recently admitted
                    self._preempt(victim, waiting)
                    preempted = True
                    if victim is s:
                        break
                if victim is s:
                    break
                s.blocks += pool.allocate(need)
            if end // bs > c // bs and c // bs < len(s.hashes) and not s.ending:  # blocks became full: cache
                pool.register(s.blocks, s.hashes, c // bs, end // bs)  # (async caps at the tokens it knows)
            s.new = new
            budget -= new
            scheduled.append(s)
            i += 1
        if preempted:  # vLLM admits nothing in a step that preempted
            return scheduled
        while waiting and budget > 0 and len(running) < cfg.max_num_seqs:
            s = waiting[0]
            hit = self._lookup(s)
            if not cfg.newer:  # 0.11.0 counts every lookup
                self.queries += s.num_tokens
                self.hits += len(hit) * bs
            new, fresh, need = self._admission_need(s, hit, budget)
            if need > len(pool.free):
                break
            if cfg.newer:  # 0.33.0 counts at admission, preempted requests apart
                if s.preemptions:
                    self.preempted_queries += s.num_tokens
                    self.preempted_hits += len(hit) * bs
                else:
                    self.queries += s.num_tokens
                    self.hits += len(hit) * bs
            pool.touch(hit)
            s.blocks = hit + pool.allocate(fresh)
            s.computed = len(hit) * bs
            if s.cached is None:
                s.cached = s.computed
            pool.register(s.blocks, s.hashes, len(hit), (s.computed + new) // bs)
            s.new = new
            budget -= new
            waiting.popleft()
            running.append(s)
            scheduled.append(s)
        return scheduled

    def _preempt(self, s: _State, waiting: deque) -> None:
        self.pool.release(s.blocks)
        s.blocks = []
        s.computed = 0
        s.preemptions += 1
        if not s.ending:  # a finished request whose stop was unread is done when the stop is read
            waiting.appendleft(s)

    def _update(self, running: list[_State], scheduled: list[_State]) -> None:
        finished = False
        late = self.cfg.newer  # async scheduling reads a step's output after scheduling the next step
        if late:  # the stops read now: what finished in the previous step frees its blocks
            for s in running:
                if s.ending:
                    self.pool.release(s.blocks)
                    s.blocks = []
                    finished = True
        for s in scheduled:
            if s.ending:
                continue  # its extra token is not counted as work a request needed
            s.computed += s.new
            s.computed_total += s.new
            if s.computed == s.num_tokens:  # the step's logits sample one token
                s.generated += 1
                s.num_tokens += 1
                if s.generated >= s.max_out:
                    if late and not s.req.stopped_at_max_tokens:
                        s.ending = True  # released after the next step is scheduled
                        continue
                    self.pool.release(s.blocks)
                    s.blocks = []
                    finished = True
        if finished:
            running[:] = [s for s in running if s.generated < s.max_out or (s.ending and s.blocks)]

    def _fast_forward(self, running: list[_State], waiting: deque) -> None:
        """Skip the steps in which every running request decodes inside its last block without filling it
        and none finishes, while the head of the queue stays blocked: the pool does not change in them."""
        if not running:
            return
        bs, cfg = self.cfg.block_size, self.cfg
        k = 1 << 62
        for s in running:
            if s.computed != s.num_tokens - 1:
                return  # still in prefill
            # quiet until the step that fills the last block (if that block is cached) or needs a new one
            room = len(s.blocks) * bs - s.computed - (1 if s.computed // bs < len(s.hashes) else 0)
            k = min(k, room, s.max_out - s.generated - 1)
            if k < 1:
                return
        budget = cfg.max_batched_tokens - len(running)
        if budget < 0:
            return
        lookups = waiting and budget > 0 and len(running) < cfg.max_num_seqs
        if lookups:
            head = waiting[0]
            hit = self._lookup(head)
            if self._admission_need(head, hit, budget)[2] <= len(self.pool.free):
                return  # it would be admitted now
            if not cfg.newer:  # 0.11.0 counts the blocked head's lookup in every skipped step
                self.queries += k * head.num_tokens
                self.hits += k * len(hit) * bs
        for s in running:
            s.computed += k
            s.computed_total += k
            s.generated += k
            s.num_tokens += k
        self.steps += k
        if self.trace is not None:
            self.trace += [[(s.req.episode, s.req.step, 1) for s in running] for _ in range(k)]


def batches(requests: Iterable[Request], schedule: str) -> Iterable[list[Request]]:
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
    engine = PrefixCacheSim(cfg)
    results = engine.run(requests)
    return engine.summary(results), results


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


MAX_TOKEN_ID = 2**63  # token ids are held as int64


def _ids_or_text(d: dict, ids_key: str, text_key: str, where: str, tokenizer, vocab_size) -> list[int] | None:
    """Token ids given as ids (`ids_key`) or as text to tokenize (`text_key`); None when neither is there."""
    if ids_key in d:
        return _token_ids(d[ids_key], ids_key, where, vocab_size)
    if text_key not in d:
        return None
    if not isinstance(d[text_key], str):
        raise ValueError(f"{where}: {text_key!r} must be a string")
    if tokenizer is None:
        raise ValueError(f"{where}: has {text_key!r} but no tokenizer was given (--tokenizer)")
    return tokenizer.encode(d[text_key])


def _token_ids(value, key: str, where: str, vocab_size: int) -> list[int]:
    if not isinstance(value, list):
        raise ValueError(f"{where}: {key!r} must be a list of token ids, got {type(value).__name__}")
    for i, t in enumerate(value):
        # bool is an int in Python and JSON's true/false would pass as 1/0
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab_size:
            raise ValueError(f"{where}: {key!r}[{i}] = {t!r} is not a token id (an integer in [0, {vocab_size}))")
    return value


def read_requests(path: str, tokenizer=None, vocab_size: int = MAX_TOKEN_ID) -> list[Request]:
    """Read a JSONL stream: each line has `episode`, `step` and `token_ids` or `text` (the whole prompt as
    sent, chat-template markers included; needs `tokenizer`). Optional: `completion_tokens`,
    `response_token_ids` or `response_text`. Every error names the file, the line and the key."""
    import json

    out = []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            where = f"{path}:{n}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{where}: not valid UTF-8 (byte {e.start})") from None
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not JSON: {e}") from None
            if not isinstance(d, dict):
                raise ValueError(f"{where}: expected an object")
            for key in ("episode", "step"):
                if key not in d:
                    raise ValueError(f"{where}: missing key {key!r}")
            if not isinstance(d["step"], int) or isinstance(d["step"], bool) or d["step"] < 0:
                raise ValueError(f"{where}: 'step' must be a non-negative integer, got {d['step']!r}")
            ids = _ids_or_text(d, "token_ids", "text", where, tokenizer, vocab_size)
            if ids is None:
                raise ValueError(f"{where}: needs 'token_ids' or 'text'")
            completion = d.get("completion_tokens", 0)
            if not isinstance(completion, int) or isinstance(completion, bool) or completion < 0:
                raise ValueError(f"{where}: 'completion_tokens' must be a non-negative integer, got {completion!r}")
            resp = _ids_or_text(d, "response_token_ids", "response_text", where, tokenizer, vocab_size)
            try:
                out.append(Request(str(d["episode"]), d["step"], np.asarray(ids, dtype=np.int64), completion,
                                   None if resp is None else np.asarray(resp, dtype=np.int64)))
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
    if not out:
        raise ValueError(f"{path}: no requests")
    return out


RESULTS_SCHEMA = pa.schema([("episode", pa.string()), ("step", pa.int64()), ("prompt_tokens", pa.int64()),
                            ("cached_tokens", pa.int64()), ("recomputed_tokens", pa.int64()),
                            ("preemptions", pa.int64())])


def results_table(results: Sequence[RequestResult]) -> pa.Table:
    """One row per request (per_request.parquet), its columns assembled from their buffers.

    Not `Table.from_pylist` or `pa.array`: whenever pandas is installed, pyarrow (26) imports it on the first
    such call to ask whether the values are pandas objects, 0.18 s and 360 modules that `skillrepro kvcache
    simulate` would pay on every run (perf/kvcache_cli.py)."""
    n = len(results)
    names = [r.episode.encode() for r in results]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([len(b) for b in names], out=offsets[1:])
    if offsets[-1] >= 2**31:  # a string column's offsets are int32
        raise ValueError(f"episode names take {offsets[-1]} bytes, more than one Arrow string column holds")
    columns = [pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                      pa.py_buffer(b"".join(names))])]
    for name in RESULTS_SCHEMA.names[1:]:
        values = np.fromiter((getattr(r, name) for r in results), dtype=np.int64, count=n)
        columns.append(pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(values)]))
    return pa.Table.from_arrays(columns, schema=RESULTS_SCHEMA)
