"""Simulator cases computed by hand (block size 16 unless a test says otherwise)."""
from __future__ import annotations

import numpy as np
import pytest

from skillrepro.studies.kvcache.sim import (
    BlockPool,
    CacheConfig,
    LlamaCppConfig,
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
    # capacity 4 blocks; y needs 2: the never-used block, then x's last block
    _, res = seq(CacheConfig(capacity_tokens=64), Request("x", 0, x), Request("y", 0, toks(900, 32)),
                 Request("x", 1, x))
    assert res[2].cached_tokens == 32  # x0, x1 survive; the cap (47//16 = 2 blocks) also allows 32
    # y needs 3 blocks: evicts the free one, x2 and x1; only x0 remains
    _, res = seq(CacheConfig(capacity_tokens=64), Request("x", 0, x), Request("y", 0, toks(900, 48)),
                 Request("x", 1, x))
    assert res[2].cached_tokens == 16


def test_lru_order_in_the_pool():
    pool = BlockPool(4)
    blocks = pool.allocate(3)
    pool.register(blocks, [11, 12, 13], 0, 3)
    pool.release(blocks)
    assert list(pool.free) == [3, 2, 1, 0]
    pool.allocate(2)  # block 3 (never used), then block 2 (hash 13)
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


def test_lockstep_preempts_latest_arrival_and_recomputes_it():
    # capacity 6 blocks; each request: 32 prompt tokens (2 blocks) + 32 output tokens (2 more blocks)
    a = Request("a", 0, toks(0, 32), completion_tokens=32)
    b = Request("b", 0, toks(5000, 32), completion_tokens=32)
    s, res = simulate([a, b], CacheConfig(capacity_tokens=96))
    ra, rb = res
    # round 1: both admitted (4 blocks); round 2: each grows one block (6); round 3: a needs a 7th block,
    # so b (the latest arrival) is preempted; b is re-admitted with its 16 generated tokens: its 2 prompt
    # blocks are still cached, so only those 16 are recomputed.
    assert (ra.preemptions, rb.preemptions) == (0, 1)
    assert (ra.cached_tokens, rb.cached_tokens) == (0, 0)  # reported at first scheduling
    assert ra.recomputed_tokens == 32 and rb.recomputed_tokens == 32 + 16
    assert s.preemptions == 1 and s.recomputed_tokens == 80


def test_lockstep_requests_of_one_step_share_blocks():
    skills = toks(0, 320)
    reqs = [Request(f"e{i}", 0, np.concatenate([skills, toks(10_000 * (i + 1), 50)])) for i in range(3)]
    s, res = simulate(reqs, CacheConfig(capacity_tokens=10_000))
    assert [r.cached_tokens for r in res] == [0, 320, 320]
    assert s.reuse_ratio == pytest.approx(640 / 1110, abs=1e-6)


def test_request_larger_than_cache_names_it():
    with pytest.raises(ValueError, match="episode 'big' step 3"):
        simulate([Request("big", 3, toks(0, 200))], CacheConfig(capacity_tokens=64))


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="policy"):
        CacheConfig(capacity_tokens=64, policy="keep")
    with pytest.raises(ValueError, match="capacity_tokens"):
        CacheConfig(capacity_tokens=8)


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
