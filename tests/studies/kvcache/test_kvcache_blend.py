"""Non-prefix chunk reuse on a small random Qwen2 model (the real GGUF runs in the kvcache_blend rule):
RoPE re-rotation, the cache splice, and the table's counts and test."""
from __future__ import annotations

import pytest

from skillrepro.studies.kvcache import blend as B
from skillrepro.studies.kvcache import replay as R
from repo import DATA

TRAJECTORIES = DATA / "kvcache_trajectories.json"


class CharTokenizer:
    """One token per character (ids below the model's vocabulary), with offsets: enough to place chunks."""

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):
        out = {"input_ids": [ord(c) % 251 for c in text]}
        if return_offsets_mapping:
            out["offset_mapping"] = [(i, i + 1) for i in range(len(text))]
        return out


@pytest.fixture(scope="module")
def torch():
    """Imported when a test runs, not when the suite is collected (about 3 s, and its memory in pytest's process)."""
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def blender(torch):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=8192, rope_theta=10000.0)
    return B.Blender(Qwen2ForCausalLM(cfg), CharTokenizer())


def test_rotation_moves_keys_to_another_position(blender, torch):
    ids = torch.randint(0, 256, (1, 12))
    at0 = blender.lm(ids, use_cache=True).cache.layers
    at37 = blender.lm(ids, position_ids=torch.arange(37, 49)[None], use_cache=True).cache.layers
    for a, b in zip(at0, at37):
        assert torch.allclose(blender.rotate(a.keys, 37), b.keys, atol=1e-5)
        assert not torch.allclose(a.keys, b.keys, atol=1e-3)
        assert torch.allclose(blender.rotate(b.keys, -37), a.keys, atol=1e-5)


@pytest.fixture(scope="module")
def targets():
    return B.targets_from_trajectories(R.read_trajectories(TRAJECTORIES), min_step=2)


def test_targets_place_every_chunk_and_find_reuse_sources(targets):
    assert len(targets) == (6 - 2) + (7 - 2)
    t = targets[0]
    for name in B.CHUNKS:
        c0, c1 = t.chunks[name]
        assert c1 > c0
    assert t.prompt[slice(*t.chunks["A"])].startswith("['") and t.prompt[slice(*t.chunks["A"])].endswith("']")
    assert "G" in t.others and "M" in t.others  # the other game's prompts carry the same general skills
    assert "C" not in t.others  # the two games are of different categories: no other copy of C
    assert "H" in t.others  # the first history item was shown at the previous step too


def test_noise_context_changes_nothing_and_alone_does(blender, targets):
    rows = {(r.chunk, r.context): r for r in blender.run(targets[0], chunks=("G", "A"))}
    for chunk in ("G", "A"):
        noise = rows[chunk, "noise"]
        assert noise.k_rel < 1e-4 and abs(noise.action_logprob_shift) < 1e-3
        alone = rows[chunk, "alone"]
        assert alone.k_rel > 100 * max(noise.k_rel, 1e-7) and alone.context_tokens == 0
        assert len(alone.k_rel_layers.split(",")) == 3
    assert rows["G", "other"].context_tokens > 0
    # every cell is measured against the same full recomputation of the target
    assert rows["G", "noise"].action_logprob_full == rows["G", "alone"].action_logprob_full


def test_summary_counts_large_shifts_and_tests_them_against_noise():
    rows = ([B.BlendRow("e", i, "G", "noise", 10, 5, 10, 0.0, "0", 0.0, -1.0, -1.0, 0.0) for i in range(10)]
            + [B.BlendRow("e", i, "G", "alone", 10, 5, 0, 0.3, "0.3", 0.2, -1.0, -2.0, -1.0 if i < 6 else 0.1)
               for i in range(10)])
    s = B.summarize(rows).set_index(["chunk", "context"])
    assert s.loc[("G", "alone"), "large_shifts"] == 6 and s.loc[("G", "noise"), "large_shifts"] == 0
    assert s.loc[("G", "alone"), "fisher_p_vs_noise"] == pytest.approx(B.fisher_greater(6, 10, 0, 10))
    assert B.fisher_greater(6, 10, 0, 10) == pytest.approx(0.005418, abs=1e-6)  # scipy's fisher_exact, 'greater'
    assert B.fisher_greater(0, 10, 0, 10) == 1.0


def test_history_chunk_is_the_whole_first_item_over_every_line():
    from skillrepro.studies.kvcache import formats as F

    turns = [F.Turn("-= Welcome =-\n\nYou are in a room.\n\nYour task is to: heat some egg.", "go to fridge 1"),
             F.Turn("You arrive at fridge 1.", "open fridge 1")]
    h = B.chunk_texts(F.load_bank(), "heat", turns, ["look"])["H"]
    assert h == "[Observation 1: '-= Welcome =-\n\nYou are in a room.\n\nYour task is to: heat some egg.', " \
                "Action 1: 'go to fridge 1']"
    assert h in F.format_progress(turns, 2)


def test_samples_spread_over_every_trajectory_and_invalid_replies_are_counted(blender):
    trs = R.read_trajectories(TRAJECTORIES)
    every = B.targets_from_trajectories(trs, min_step=2)
    even = B.targets_from_trajectories(trs, min_step=2, limit=3)
    assert [(t.episode, t.step) for t in even] == [(every[i].episode, every[i].step) for i in (0, 4, 8)]
    assert len({t.episode for t in even}) == 2  # the first-N pick stays in the first game
    assert {t.episode for t in B.targets_from_trajectories(trs, min_step=2, limit=3, spread="first")} == {every[0].episode}
    with pytest.raises(ValueError, match="kvcache.blend.spread: 'random'"):
        B.targets_from_trajectories(trs, limit=3, spread="random")
    broken = [B.Target(t.episode, t.step, t.prompt, r, t.chunks, t.others)
              for t, r in zip(even, ["<think>hm</think>go to desk 1", "<action> </action>", even[2].reply])]
    s = B.sample_rows(broken)
    assert [x.format_valid for x in s] == [False, False, True] and s[2].h_chars > 0
    assert blender.run(broken[0]) == [] and blender.run(broken[1]) == []  # wrong outputs are not scored
    summary = B.summarize([B.BlendRow("e", 2, "G", "noise", 10, 5, 10, 0.0, "0", 0.0, -1.0, -1.0, 0.0)], samples=s)
    assert (summary.targets == 3).all() and (summary.format_invalid == 2).all()
