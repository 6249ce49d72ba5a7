"""Simulator cases computed by hand (block size 16 unless a test says otherwise)."""
from __future__ import annotations

import numpy as np
import pytest

from skillrepro.studies.kvcache.sim import (
    VLLM_VERSION,
    BlockPool,
    CacheConfig,
    LlamaCppConfig,
    PrefixCacheSim,
    Request,
    block_hashes,
    simulate,
    simulate_llamacpp,
)


def toks(start: int, n: int) -> np.ndarray:
    return np.arange(start, start + n)


def seq(cfg: CacheConfig, *reqs: Request):
    cfg.schedule = "sequential"
    return simulate(list(reqs), cfg)


def test_block_hashes_chain_and_skip_partial_block():
    a = toks(0, 64)
    b = a.copy()
    b[5] = 999  # differs inside block 0 only
    ha, hb = block_hashes(a, 16), block_hashes(b, 16)
    assert len(ha) == 4 and len(block_hashes(a[:63], 16)) == 3  # trailing partial block has no hash
    assert all(x != y for x, y in zip(ha, hb))  # identical blocks 1..3 still differ: the parent differs
    assert block_hashes(a[:40], 16) == ha[:2]
    assert block_hashes(a, 16) == ha  # deterministic


def test_partial_last_block_is_not_cached():
    p1 = toks(0, 40)  # two full blocks + 8 tokens
    p2 = np.concatenate([p1, toks(1000, 10)])
    s, res = seq(CacheConfig(capacity_tokens=1024), Request("e", 0, p1), Request("e", 1, p2))
    assert [r.cached_tokens for r in res] == [0, 32]
    assert s.cached_tokens == 32 and s.prompt_tokens == 90
    assert s.recomputed_tokens == 90 - 32


@pytest.mark.parametrize("n,expected", [(16, 0), (17, 16), (32, 16), (33, 32), (48, 32), (50, 48), (1421, 1408)])
def test_full_repeat_hits_floor_n_minus_1(n, expected):
    p = toks(7, n)
    _, res = seq(CacheConfig(capacity_tokens=4096), Request("e", 0, p), Request("e", 1, p))
    assert res[1].cached_tokens == expected == (n - 1) // 16 * 16


def test_divergence_mid_block_and_chain():
    a = toks(0, 64)
    b = np.concatenate([a[:40], toks(500, 24)])  # diverges at token 40, inside block 2
    c = a.copy()
    c[5] = 12345  # diverges in block 0: blocks 1-3 are the same text but unusable
    _, res = seq(CacheConfig(capacity_tokens=4096), Request("a", 0, a), Request("b", 0, b), Request("c", 0, c))
    assert [r.cached_tokens for r in res] == [0, 32, 0]


def test_eviction_takes_the_finished_requests_last_block_first():
    x = toks(0, 48)  # 3 full blocks
    # 5 blocks, the null block reserved: 4 usable; y needs 2: the never-used block, then x's last block
    _, res = seq(CacheConfig(capacity_tokens=80), Request("x", 0, x), Request("y", 0, toks(900, 32)),
                 Request("x", 1, x))
    assert res[2].cached_tokens == 32  # x0, x1 survive; the cap (47//16 = 2 blocks) also allows 32
    # y needs 3 blocks: evicts the free one, x2 and x1; only x0 remains
    _, res = seq(CacheConfig(capacity_tokens=80), Request("x", 0, x), Request("y", 0, toks(900, 48)),
                 Request("x", 1, x))
    assert res[2].cached_tokens == 16


def test_lru_order_in_the_pool():
    pool = BlockPool(5)  # block 0 is the null block
    blocks = pool.allocate(3)
    assert blocks == [1, 2, 3]
    pool.register(blocks, [11, 12, 13], 0, 3)
    pool.release(blocks)
    assert list(pool.free) == [4, 3, 2, 1]
    pool.allocate(2)  # block 4 (never used), then block 3 (hash 13)
    assert set(pool.cached) == {11, 12} and pool.evictions == 1
    pool.touch(pool.longest_hit([11, 12], 2))
    assert list(pool.free) == []


def test_flush_policy_empties_the_cache_between_steps_only():
    p = toks(0, 100)
    reqs = [Request("a", 0, p), Request("b", 0, p), Request("a", 1, p), Request("b", 1, p)]
    _, retain = simulate(reqs, CacheConfig(capacity_tokens=4096, policy="retain"))
    _, flush = simulate(reqs, CacheConfig(capacity_tokens=4096, policy="flush"))
    assert [r.cached_tokens for r in retain] == [0, 96, 96, 96]
    # b still reuses a's blocks inside the same step; every step starts cold
    assert [r.cached_tokens for r in flush] == [0, 96, 0, 96]


def test_lockstep_requests_of_one_step_share_blocks():
    skills = toks(0, 320)
    reqs = [Request(f"e{i}", 0, np.concatenate([skills, toks(10_000 * (i + 1), 50)])) for i in range(3)]
    s, res = simulate(reqs, CacheConfig(capacity_tokens=10_000))
    assert [r.cached_tokens for r in res] == [0, 320, 320]
    assert s.reuse_ratio == pytest.approx(640 / 1110, abs=1e-6)


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="policy"):
        CacheConfig(capacity_tokens=64, policy="keep")
    with pytest.raises(ValueError, match="capacity_tokens"):
        CacheConfig(capacity_tokens=16)  # one block: nothing left beside the null block
    with pytest.raises(ValueError, match="max_num_seqs"):
        CacheConfig(capacity_tokens=64, max_num_seqs=0)


def test_llamacpp_single_slot_keeps_prompt_and_reply():
    p1 = toks(0, 100)
    reply = toks(200, 10)
    p2 = np.concatenate([p1, reply, toks(300, 21)])
    p3 = np.concatenate([p2[:37], toks(900, 5)])
    s, res = simulate_llamacpp([
        Request("e", 0, p1, response_token_ids=reply),
        Request("e", 1, p2),
        Request("e", 2, p2),  # full repeat: all but the last token
        Request("e", 3, p3),
    ])
    # the reply's last token was sampled but never evaluated: 100 + 9 tokens are in the slot
    assert [r.cached_tokens for r in res] == [0, 109, len(p2) - 1, 37]
    assert s.requests == 4


def test_llamacpp_two_slots_pick_the_similar_one():
    a, b = toks(0, 100), toks(5000, 100)
    _, res = simulate_llamacpp([Request("a", 0, a), Request("b", 0, b), Request("a", 1, a)],
                               LlamaCppConfig(slots=2))
    assert [r.cached_tokens for r in res] == [0, 0, 99]
    _, res = simulate_llamacpp([Request("a", 0, a), Request("b", 0, b), Request("a", 1, a)])
    assert [r.cached_tokens for r in res] == [0, 0, 0]  # one slot: b replaced a


# -- vLLM 0.11.0's scheduler rules, one test each ------------------------------------------------------


def traced(cfg: CacheConfig, reqs, fast_forward: bool = True):
    engine = PrefixCacheSim(cfg, trace=True, fast_forward=fast_forward)
    results = engine.run(reqs)
    return engine, results


def test_pinned_version_and_its_serving_defaults():
    cfg = CacheConfig(capacity_tokens=419_000)
    assert VLLM_VERSION == "0.11.0"
    assert (cfg.max_num_seqs, cfg.max_batched_tokens) == (1024, 8192)


def test_null_block_is_reserved():
    cfg = CacheConfig(capacity_tokens=64)  # 4 blocks: 3 usable
    assert cfg.usable_blocks == 3
    engine = PrefixCacheSim(cfg)
    assert 0 not in engine.pool.free and len(engine.pool.free) == 3
    simulate([Request("a", 0, toks(0, 48))], cfg)  # exactly the 3 usable blocks
    with pytest.raises(ValueError, match="episode 'b' step 0"):
        simulate([Request("b", 0, toks(0, 49))], cfg)


def test_chunked_prefill_shares_the_step_budget():
    a = Request("a", 0, toks(0, 100), completion_tokens=3)
    b = Request("b", 0, toks(1000, 100), completion_tokens=3)
    engine, _ = traced(CacheConfig(capacity_tokens=4096, max_batched_tokens=64), [a, b])
    # step 1: a's first chunk takes the whole budget; step 2: a finishes its prompt (36), b starts (28);
    # step 3: a decodes one token, b takes the rest of the budget (63 of its 72); ...
    assert engine.trace[:4] == [[("a", 0, 64)], [("a", 0, 36), ("b", 0, 28)], [("a", 0, 1), ("b", 0, 63)],
                                [("a", 0, 1), ("b", 0, 9)]]
    assert engine.trace[4:] == [[("b", 0, 1)], [("b", 0, 1)]]


def test_one_decode_token_per_running_request_per_step():
    reqs = [Request(e, 0, toks(100 * i, 20), completion_tokens=5) for i, e in enumerate("abc")]
    engine, _ = traced(CacheConfig(capacity_tokens=4096), reqs)
    assert engine.trace[0] == [("a", 0, 20), ("b", 0, 20), ("c", 0, 20)]  # prefill samples token 1
    assert engine.trace[1:] == [[("a", 0, 1), ("b", 0, 1), ("c", 0, 1)]] * 4  # tokens 2..5


def test_final_sampled_token_gets_no_kv():
    p = toks(0, 32)
    cfg = CacheConfig(capacity_tokens=64)  # 3 usable blocks = 48 tokens
    simulate([Request("a", 0, p, completion_tokens=17)], cfg)  # holds 32 + 17 - 1 = 48
    with pytest.raises(ValueError, match="need 49 tokens"):
        simulate([Request("a", 0, p, completion_tokens=18)], cfg)
    # a 16-token reply completes block 2 in the token stream, but its last token has no KV: block 2 is
    # never full, so the next step's prompt (prompt + reply + more) hits only 2 blocks
    reply = toks(500, 16)
    nxt = np.concatenate([p, reply, toks(900, 20)])
    _, res = seq(CacheConfig(capacity_tokens=4096), Request("a", 0, p, response_token_ids=reply), Request("a", 1, nxt))
    assert res[1].cached_tokens == 32
    reply = toks(500, 17)  # now 48 tokens have KV: three full blocks
    nxt = np.concatenate([p, reply, toks(900, 20)])
    _, res = seq(CacheConfig(capacity_tokens=4096), Request("a", 0, p, response_token_ids=reply), Request("a", 1, nxt))
    assert res[1].cached_tokens == 48


def test_preemption_takes_the_most_recent_and_requeues_it_in_front():
    # 5 usable blocks; a: 16-token prompt (1 block), b, c: 24 tokens (2 blocks each); d waits (max_num_seqs 3).
    # a's first decode token needs a second block: none is free, so c (admitted last) is preempted, not b
    reqs = [Request("a", 0, toks(0, 16), completion_tokens=4), Request("b", 0, toks(1000, 24), completion_tokens=4),
            Request("c", 0, toks(2000, 24), completion_tokens=4), Request("d", 0, toks(3000, 8), completion_tokens=4)]
    engine, res = traced(CacheConfig(capacity_tokens=6 * 16, max_num_seqs=3), reqs)
    assert engine.trace[0] == [("a", 0, 16), ("b", 0, 24), ("c", 0, 24)]
    assert engine.trace[1] == [("a", 0, 1), ("b", 0, 1)]  # c preempted; nothing admitted in this step
    # c, at the head of the queue, needs 2 blocks (its surviving first block sits in the free queue and
    # counts, as in vLLM) and 1 is free: it waits, and d behind it waits too, until a and b finish
    assert engine.trace[2] == engine.trace[3] == [("a", 0, 1), ("b", 0, 1)]
    # requeued at the front: c comes back before d. It had sampled one token (25 tokens); its first block
    # survived in the cache (a took its last block, freed first), so 25 - 16 = 9 tokens are recomputed
    assert engine.trace[4] == [("c", 0, 9), ("d", 0, 8)]
    by = {r.episode: r for r in res}
    assert [by[e].preemptions for e in "abcd"] == [0, 0, 1, 0]
    assert by["c"].cached_tokens == 0  # reported at its first scheduling, as vLLM does
    # its 24-token prompt, then the 9 re-prefilled tokens less the one its decode would have computed anyway
    assert by["c"].recomputed_tokens == 24 + 8
    assert by["d"].cached_tokens == 0 and by["d"].recomputed_tokens == 8


def test_a_request_that_cannot_grow_preempts_itself_when_it_is_the_latest():
    reqs = [Request(e, 0, toks(1000 * i, 16), completion_tokens=40) for i, e in enumerate("abc")]
    engine, res = traced(CacheConfig(capacity_tokens=9 * 16), reqs)  # 8 usable blocks
    # at token 32 a and b take their third block (8 in use); c, the latest, cannot: it preempts itself
    # and comes back once a and b have finished
    first = next(i for i, t in enumerate(engine.trace) if len(t) < 3)
    assert [e for e, _, _ in engine.trace[first]] == ["a", "b"]
    assert [r.preemptions for r in res] == [0, 0, 1]
    assert engine.trace[first - 1][2] == ("c", 0, 1)


def test_duplicate_blocks_are_kept():
    # a and b share an 80-token prompt; a's prefill is chunked (48 + 32), b joins in a's second step and
    # hits the 4 blocks a has registered, then computes block 4 itself: a second copy of a's block 4
    shared = toks(0, 80)
    reqs = [Request("a", 0, shared), Request("b", 0, shared)]
    engine, res = traced(CacheConfig(capacity_tokens=4096, max_batched_tokens=48), reqs)
    assert engine.trace[:2] == [[("a", 0, 48)], [("a", 0, 32), ("b", 0, 16)]]
    assert res[1].cached_tokens == 64
    h4 = block_hashes(shared, 16)[4]
    assert len(engine.pool.cached[h4]) == 2
    pool = BlockPool(4)
    blocks = pool.allocate(2)
    pool.register(blocks, [7, 7], 0, 2)
    pool.release(blocks)
    pool.allocate(2)  # the never-used block 3, then the second copy (released last-first): one copy stays
    assert pool.longest_hit([7], 1) == [1]


def test_max_num_seqs_limits_running_requests():
    reqs = [Request(e, 0, toks(1000 * i, 20), completion_tokens=3) for i, e in enumerate("abc")]
    engine, _ = traced(CacheConfig(capacity_tokens=4096, max_num_seqs=2), reqs)
    assert max(len(t) for t in engine.trace) == 2
    assert [e for e, _, _ in engine.trace[3]] == ["c"]  # admitted only once a and b have finished


def test_request_that_can_never_fit_is_rejected_before_running():
    # the prompt fits (2 blocks of 3 usable), prompt + completion never will: vLLM rejects it up front
    reqs = [Request("ok", 0, toks(0, 16), completion_tokens=5), Request("big", 3, toks(0, 32), completion_tokens=40)]
    with pytest.raises(ValueError, match=r"episode 'big' step 3: prompt \+ completion need 71 tokens"):
        simulate(reqs, CacheConfig(capacity_tokens=64))


def test_prefix_cache_counters_count_every_lookup():
    # b waits behind a (max_num_seqs 1) and is looked up once, when it is admitted; with a blocked head
    # (no free block), vLLM looks it up again every step
    a, b = Request("a", 0, toks(0, 40), completion_tokens=2), Request("b", 0, toks(0, 40), completion_tokens=2)
    s, _ = simulate([a, b], CacheConfig(capacity_tokens=4096, max_num_seqs=1))
    assert (s.prefix_cache_queries, s.prefix_cache_hits) == (80, 32)
    # 3 usable blocks: a holds all three (40 + 8 - 1 = 47 tokens) until it finishes; b is looked up every step
    a, b = Request("a", 0, toks(0, 40), completion_tokens=8), Request("b", 0, toks(500, 17), completion_tokens=1)
    engine = PrefixCacheSim(CacheConfig(capacity_tokens=64))
    results = engine.run([a, b])
    s = engine.summary(results)
    assert engine.steps == 9  # a: prefill + 7 decodes; b: admitted in step 9, once a has freed its blocks
    assert s.prefix_cache_queries == 40 + 17 * 9 and s.prefix_cache_hits == 0


@pytest.mark.parametrize("version", ["0.11.0", "0.33.0"])
@pytest.mark.parametrize("seed", range(6))
def test_fast_forward_is_exact(seed, version):
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, 50_000, 200)
    reqs = []
    for t in range(3):
        for e in range(6):
            tail = rng.integers(0, 50_000, int(rng.integers(5, 120)))
            reqs.append(Request(str(e), t, np.concatenate([shared[: int(rng.integers(0, 200))], tail]),
                                completion_tokens=int(rng.integers(0, 90))))
    cfg = CacheConfig(capacity_tokens=int(rng.choice([640, 1024, 4096])), max_batched_tokens=int(rng.choice([64, 512])),
                      max_num_seqs=int(rng.choice([2, 1024])), vllm_version=version)
    fast, r1 = traced(cfg, reqs, fast_forward=True)
    slow, r2 = traced(cfg, reqs, fast_forward=False)
    assert r1 == r2 and fast.trace == slow.trace
    assert (fast.queries, fast.hits, fast.steps) == (slow.queries, slow.hits, slow.steps)
    assert (fast.preempted_queries, fast.preempted_hits) == (slow.preempted_queries, slow.preempted_hits)


# -- vLLM 0.33.0's differences (sim.py's docstring), each against 0.11.0 on the same requests


def test_033_frees_hashless_blocks_to_the_head_so_an_older_cached_block_survives():
    # block size 4, 3 usable blocks; one request at a time. x caches its 1 full block (b1); y holds a full
    # block and a partial one. 0.11.0 appends y's freed blocks behind b1, so z's one block evicts x's b1;
    # 0.33.0 puts y's partial block at the head and z takes it, so x's prompt hits again (replies cut at
    # max_tokens: no async extra token, which would take a block of its own)
    reqs = [Request(e, t, toks(a, n), stopped_at_max_tokens=True)
            for e, t, a, n in (("x", 0, 0, 4), ("y", 0, 100, 6), ("z", 0, 200, 4), ("x", 1, 0, 5))]
    old = seq(CacheConfig(capacity_tokens=16, block_size=4), *reqs)[1]
    new = seq(CacheConfig(capacity_tokens=16, block_size=4, vllm_version="0.33.0"), *reqs)[1]
    assert old[3].cached_tokens == 0 and new[3].cached_tokens == 4


def test_033_admits_a_request_only_when_its_whole_prompt_fits():
    # block size 4, 4 usable blocks, 16 tokens a step: p prefills 12 tokens (3 blocks); 4 tokens of budget
    # and 1 block are left. 0.11.0 admits q with a 4-token chunk; 0.33.0 (scheduler_reserve_full_isl)
    # needs q's 3 blocks free and admits it only once p has finished
    reqs = [Request(e, 0, toks(a, 12), completion_tokens=1, stopped_at_max_tokens=True) for e, a in (("p", 0), ("q", 100))]
    old, _ = traced(CacheConfig(capacity_tokens=20, block_size=4, max_batched_tokens=16), reqs)
    new, _ = traced(CacheConfig(capacity_tokens=20, block_size=4, max_batched_tokens=16, vllm_version="0.33.0"), reqs)
    assert old.trace[0] == [("p", 0, 12), ("q", 0, 4)]
    assert new.trace[0] == [("p", 0, 12)]
    assert ("q", 0, 12) in new.trace[1]


def test_033_counts_prefix_lookups_at_admission_and_preempted_ones_apart():
    # the preemption case above: 0.11.0 counts c's blocked lookups in every step it waits; 0.33.0 counts
    # each request's admission once, and c's re-admission as a preempted query
    reqs = [Request("a", 0, toks(0, 16), completion_tokens=4), Request("b", 0, toks(1000, 24), completion_tokens=4),
            Request("c", 0, toks(2000, 24), completion_tokens=4), Request("d", 0, toks(3000, 8), completion_tokens=4)]
    cfg = dict(capacity_tokens=6 * 16, max_num_seqs=3)
    old, old_res = traced(CacheConfig(**cfg), reqs)
    new, new_res = traced(CacheConfig(**cfg, vllm_version="0.33.0"), reqs)
    assert sum(r.preemptions for r in new_res) == 1
    assert new.queries == 16 + 24 + 24 + 8  # every first admission once
    assert new.preempted_queries == 25  # c again, with the token it had sampled
    assert old.queries > new.queries + new.preempted_queries  # 0.11.0 also counted the blocked lookups
    assert old.preempted_queries == 0


def test_033_async_scheduling_holds_a_stopped_request_one_step_longer():
    # a 16-token prompt and 2 reply tokens: 0.11.0 frees its blocks in the step that samples the last token;
    # under 0.33.0's async scheduling the stop is read after the next step is scheduled, so the request is
    # scheduled for one more token (its 18th) first; a reply cut at max_tokens is not
    r = Request("a", 0, toks(0, 16), completion_tokens=2)
    old, old_res = traced(CacheConfig(capacity_tokens=4096), [r])
    new, res = traced(CacheConfig(capacity_tokens=4096, vllm_version="0.33.0"), [r])
    assert old.trace == [[("a", 0, 16)], [("a", 0, 1)]]
    assert new.trace == [[("a", 0, 16)], [("a", 0, 1)], [("a", 0, 1)]]
    # the extra token is not work the request needed: the prompt, as under 0.11.0
    assert res[0].recomputed_tokens == old_res[0].recomputed_tokens == 16
    cut = Request("a", 0, toks(0, 16), completion_tokens=2, stopped_at_max_tokens=True)
    assert traced(CacheConfig(capacity_tokens=4096, vllm_version="0.33.0"), [cut])[0].trace == old.trace


def test_033_keeps_reuse_with_room_for_everything():
    # with no cache pressure the versions give the same cached tokens (hashing of full blocks is unchanged)
    reqs = [Request(e, t, np.concatenate([toks(0, 40), toks(1000 * i + 50 * t, 30)]), completion_tokens=5)
            for t in range(3) for i, e in enumerate("abc")]
    old, _ = simulate(reqs, CacheConfig(capacity_tokens=4096))
    new, _ = simulate(reqs, CacheConfig(capacity_tokens=4096, vllm_version="0.33.0"))
    assert old.cached_tokens == new.cached_tokens > 0 and old.preemptions == new.preemptions == 0


def test_unknown_vllm_version_is_refused():
    with pytest.raises(ValueError, match="vllm_version must be one of 0.11.0, 0.33.0"):
        CacheConfig(capacity_tokens=64, vllm_version="0.20.0")
