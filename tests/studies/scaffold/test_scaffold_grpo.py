"""SkillScaffold's GRPO joint training: eq. 11-12 advantages by hand, and a CPU smoke run of TRL updates
on the shipped SmolLM2-135M (dequantised from its GGUF file, as the CPU scorer loads it)."""
from __future__ import annotations

import logging
import math
import time

import pytest

from skillrepro.studies.scaffold.grpo import (QueryGroup, Sample, assign_advantages, conversation_sample,
                                              generator_group_complete, generator_rewards, group_normalized,
                                              query_advantages)
from skillrepro.studies.scaffold.settings import TrainSettings

pytestmark = pytest.mark.own_process  # the models it loads stay out of the suite's process


def test_eq_11_generator_rewards():
    assert generator_rewards([0.3, -0.2], "grp") == [0.3, -0.2]
    assert generator_rewards([0.3, -0.2], "anc") == [0.3, 0.0]
    with pytest.raises(ValueError):
        generator_rewards([0.1], "best")


def test_group_normalisation():
    a = group_normalized([1, 0, 0, 1])
    assert sum(a) == pytest.approx(0) and a[0] == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-4))
    assert group_normalized([1, 1, 1]) == [0, 0, 0]


def test_eq_12_weights_make_trls_flat_mean_the_per_role_objective():
    exec_r, gen_r, lam = [1, 0, 0, 0, 1, 1, 0, 0], [0.2, -0.1, 0.05, 0.0], 0.1
    a_exec, a_gen = query_advantages(exec_r, gen_r, 4, lam)
    g = 12
    # flat mean over the 12 samples of sum(A * x) == mean_exec(A_norm * x) + lam * mean_gen(A_norm * x), any x
    xs = [0.3, -1.2, 0.5, 2.0, 0.1, -0.4, 0.9, 1.1, -0.7, 0.2, 0.6, -0.3]
    flat = sum(a * x for a, x in zip(a_exec + a_gen, xs)) / g
    want = (sum(a * x for a, x in zip(group_normalized(exec_r), xs[:8])) / 8
            + lam * sum(a * x for a, x in zip(group_normalized(gen_r), xs[8:])) / 4)
    assert flat == pytest.approx(want)
    assert sum(a_exec) + sum(a_gen) == pytest.approx(0, abs=1e-9)  # TRL's group-mean subtraction is a no-op
    assert query_advantages(exec_r, None, 4, lam)[1] == [0.0] * 4


def test_incomplete_generator_group_is_omitted():
    assert generator_group_complete([0.1, 0.2], [True, True], 2)
    assert not generator_group_complete([0.1, float("nan")], [True, True], 2)
    assert not generator_group_complete([0.1, 0.2], [True, False], 2)
    assert not generator_group_complete([0.1], [True], 2)
    s = lambda role, r: Sample("q", role, [1], [2, 3], [1, 1], r)  # noqa: E731
    q = QueryGroup("q", [s("executor", 1.0), s("executor", 0.0)], [s("generator", 0), s("generator", 0)],
                   [0.3, float("nan")], [True, True])
    out = assign_advantages([q], 2, 0.1)
    assert not q.trainable_generator and [x.advantage for x in out[2:]] == [0.0, 0.0]
    assert out[0].advantage > 0 > out[1].advantage
    # no cards at all (anc without a success): placeholders keep the group size, masked out
    q2 = QueryGroup("q2", [s("executor", 1.0), s("executor", 0.0)], [], [], [], "anc")
    out2 = assign_advantages([q2], 2, 0.1)
    assert len(out2) == 4 and all(x.mask == [0] and x.advantage == 0 for x in out2[2:])


def test_an_update_reports_its_micro_batches_on_the_console(caplog):
    """The GRPO update's progress: the Trainer's events (dispatched as transformers' CallbackHandler does in a
    training loop, here 2 optimizer steps of 2 accumulated micro-batches) each count one micro-batch."""
    from types import SimpleNamespace

    from transformers import TrainerControl, TrainerState
    from transformers.trainer_callback import CallbackHandler

    from skillrepro.progress import PROGRESS_LOGGER, Progress
    from skillrepro.studies.scaffold.grpo import progress_callback

    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        with Progress(4, "micro-batches (2 per optimizer step, 2 steps)", label="update") as progress:
            handler = CallbackHandler([progress_callback(progress)], None, None, None, None)
            args, state, control = SimpleNamespace(), TrainerState(), TrainerControl()
            for _ in range(2):
                handler.on_step_begin(args, state, control)
                handler.on_substep_end(args, state, control)
                handler.on_optimizer_step(args, state, control)
                handler.on_step_end(args, state, control)
    lines = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER]
    assert [x.split(" micro")[0] for x in lines if " done, " in x] == [f"update: {k}/4" for k in (1, 2, 3, 4)]
    assert lines[-1].startswith("update: finished, 4/4 micro-batches (2 per optimizer step, 2 steps)")


@pytest.fixture(scope="module")
def tiny():
    import torch

    from skillrepro.llm.scorer import ChatSequencer
    from skillrepro.studies.scaffold.grpo import load_policy

    torch.manual_seed(0)
    model, tok = load_policy("smollm2-135m")
    return model, tok, ChatSequencer(tok)


def _groups(seq):
    from skillrepro.studies.scaffold.cards import REPLY_FORMS

    PREFILL = REPLY_FORMS["json"].opening  # a reply of the json form

    execs, gens = [], []
    for i, ok in enumerate([True, False, True, False]):
        msgs = [{"role": "system", "content": "You act in a grid world."},
                {"role": "user", "content": "Mission: go to the red ball."},
                {"role": "assistant", "content": f"Thought: turn.\nAction: {'go_forward' if ok else 'turn_left'}()"},
                {"role": "user", "content": f"Observation: step {i}."},
                {"role": "assistant", "content": "Action: done()"}]
        execs.append(conversation_sample(seq, msgs, "q0", "executor", float(ok)))
    for j in range(2):
        msgs = [{"role": "user", "content": "Write a card as JSON."},
                {"role": "assistant", "content": PREFILL + f'go-{j}\\n## When to apply\\nAlways."}}'}]
        gens.append(conversation_sample(seq, msgs, "q0", "generator", 0.0, skip_chars=len(PREFILL)))
    return [QueryGroup("q0", execs, gens, [0.4, -0.2], [True, True])]


@pytest.mark.integration
def test_samples_mask_only_the_policys_tokens(tiny):
    _, tok, seq = tiny
    g = _groups(seq)[0]
    e = g.executor[0]
    own = tok.decode([t for t, m in zip(e.completion_ids, e.mask) if m])
    assert "go_forward()" in own and "done()" in own and "Observation" not in own and "Mission" not in own
    c = g.generator[0]
    card = tok.decode([t for t, m in zip(c.completion_ids, c.mask) if m])
    assert card.lstrip().startswith("go-0") and '"skill"' not in card and "Skill" not in card  # the pre-fill is not the policy's


@pytest.mark.integration
def test_cpu_smoke_run_updates_the_policy_and_micro_batches_accumulate(tiny, tmp_path, caplog):
    """One GRPO update moves most of the policy. The same step in micro-batches of 2 (3 accumulated backward
    passes over the 6 sequences) takes the same gradient (read from Adam's first moment, (1 - beta1) g after
    one step; the Generator's entropy term off, as it is averaged per micro-batch); a sample longer than
    max_sequence_tokens stops the update. The update's progress counts TRL's micro-batches."""
    import copy

    import torch

    from skillrepro.progress import PROGRESS_LOGGER
    from skillrepro.studies.scaffold.grpo import make_trainer, train

    model, tok, seq = tiny
    samples = assign_advantages(_groups(seq), 2, 0.1)
    untrained = copy.deepcopy(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    assert make_trainer(copy.deepcopy(model), tok, samples, 6, TrainSettings(), tmp_path / "t", steps=1,
                        temperature=0.7).temperature == 0.7  # a CPU preset samples at 0.7
    grads = []
    for m, micro in ((model, None), (untrained, 2)):
        started = time.perf_counter()
        settings = TrainSettings(learning_rate=1e-4, micro_batch_size=micro, generator_entropy_coef=0.0)
        trainer = make_trainer(m, tok, samples, 6, settings, tmp_path / str(micro), steps=1)
        # TRL takes the ratio's log-probs at the temperature the samples were drawn at (the paper's 1.0 here)
        assert trainer.temperature == 1.0
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
            train(trainer)
        n = 6 // (micro or 6)
        # this update's lines, not another job's, nor the minute heartbeat a slow (loaded) machine adds
        done = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER and " done, " in r.getMessage()
                and r.getMessage().startswith("job: ") and "still running" not in r.getMessage()]
        assert [x.split(": ")[1].split(" micro")[0] for x in done] == [f"{k}/{n}" for k in range(1, n + 1)]
        assert trainer.state.global_step == 1
        state = trainer.optimizer.state
        grads.append(torch.cat([state[p]["exp_avg"].flatten() for p in m.parameters() if p in state]))
        print(f"CPU smoke run: 1 GRPO update (micro-batch {micro or 6}) on SmolLM2-135M in "
              f"{time.perf_counter() - started:.1f} s")
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert len(changed) > 0.5 * len(before)
    rel = ((grads[0] - grads[1]).norm() / grads[0].norm()).item()
    assert grads[0].norm() > 0 and rel < 1e-3, rel
    longest = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    with pytest.raises(ValueError, match="scaffold.training.max_sequence_tokens"):
        make_trainer(model, tok, samples, 6, TrainSettings(max_sequence_tokens=longest - 1), tmp_path / "x", steps=1)


def test_internalization_cohort_and_bootstrap():
    import pandas as pd

    from skillrepro.studies.scaffold.cohort import benefit_cohort, internalization

    sel = pd.DataFrame({"task_id": ["a", "b", "c", "d"], "selected": [0, 2, -1, 1], "n_success": [0, 2, 0, 1],
                        "n_scouts": [4, 4, 4, 4]})
    post = pd.DataFrame({"task_id": list("aaaabbbbccccdddd"),
                         "success": [1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0]})
    assert benefit_cohort(sel, post) == ["a"]  # b: 1/4 < 2/4; c: not injected; d: 0 < 1/4
    early = pd.DataFrame({"task_id": ["a", "a", "b", "b"], "success": [0, 0, 1, 0]})
    later = pd.DataFrame({"task_id": ["a", "a", "b", "b"], "success": [1, 0, 1, 1]})
    r = internalization(early, later, ["a", "b"], n_boot=2000)
    assert r.n_queries == 2 and r.recovery_pp == pytest.approx(50.0)
    assert math.isnan(r.ci_low) and "too few queries" in r.interval  # 2 queries cannot hold a 95 % interval
    later2 = pd.DataFrame({"task_id": ["a", "a", "b", "b"], "success": [1, 1, 0, 0]})
    r2 = internalization(early, later2, ["a", "b"], n_boot=2000)
    assert r2.recovery_pp == pytest.approx(25.0)
    # six queries: each gains 50 pp (a, b, c) or 0 (d, e, f): the expanded interval lies inside the data's range
    tasks = list("abcdef")
    early6 = pd.DataFrame({"task_id": tasks, "success": [0.0] * 6})
    later6 = pd.DataFrame({"task_id": tasks * 2, "success": [1.0] * 3 + [0.0] * 9})
    r6 = internalization(early6, later6, tasks, n_boot=2000)
    assert r6.recovery_pp == pytest.approx(25.0) and 0 <= r6.ci_low < 25 < r6.ci_high <= 50
    assert r6.interval == "95 % expanded-percentile bootstrap, n = 6"
    with pytest.raises(ValueError, match="'z'"):
        internalization(early, later, ["z"])


@pytest.mark.integration
def test_groups_from_the_scaffold_records(tiny):
    """Scouts + Post-Scouts become the Executor's samples and the cards, with the request each came from,
    the Generator's; a group is N+L+M samples, and the pre-fill is kept out of the card's mask."""
    import json

    import pandas as pd

    from skillrepro.studies.scaffold.cards import REPLY_FORMS

    PREFILL = REPLY_FORMS["json"].opening  # a reply of the json form
    from skillrepro.studies.scaffold.records import CandidateRecord, Trajectory, UtilityRecord
    from skillrepro.studies.scaffold.grpo import groups_from_records

    _, tok, seq = tiny

    def traj(i, ok):
        msgs = ({"role": "system", "content": "S"}, {"role": "user", "content": "Mission: go."},
                {"role": "assistant", "content": f"Action: go_forward() {i}"})
        return Trajectory(f"e{i}", "7", ok, i, msgs, ())

    req = [{"role": "system", "content": "G"}, {"role": "user", "content": "evidence"},
           {"role": "assistant", "content": PREFILL}]
    calls = pd.DataFrame({"call_id": ["c0", "c1"], "prompt": [json.dumps({"messages": req})] * 2})
    cards = [CandidateRecord("b", "grp", "7", j, PREFILL + f'card-{j}\\n## X\\ny"}}', "", "", 3, True, "", f"c{j}")
             for j in range(2)]
    utils = [UtilityRecord("b", "grp", "7", j, "mixed", 1, 1, u, True, True) for j, u in enumerate([0.2, -0.1])]
    (g,) = groups_from_records(seq, "grp", 2, [traj(0, True), traj(1, False)], [traj(2, True)], cards, utils, calls)
    assert len(g.executor) == 3 and [s.reward for s in g.executor] == [1.0, 0.0, 1.0]
    assert len(g.generator) == 2 and g.utilities == [0.2, -0.1]
    own = tok.decode([t for t, m in zip(g.generator[1].completion_ids, g.generator[1].mask) if m])
    assert "card-1" in own and "skill" not in own and "evidence" not in tok.decode(g.generator[1].completion_ids)


@pytest.mark.parametrize("key,value,match", [
    ("optimizer", "adamw", "scaffold.training.optimizer: 'adamw' is not implemented"),
    ("global_batch_size", 100, r"scaffold.training.global_batch_size: 100 is not implemented.*16 x 8 = 128"),
    ("micro_batch_size", 5, "scaffold.training.micro_batch_size: 5 does not divide the 192"),
    ("cohort_iterations", 20, "scaffold.training.cohort_iterations: 20 exceeds steps"),
    ("warmup", 3, "scaffold.training.warmup: not a training setting"),
])
def test_table5_keys_not_honoured_are_refused_by_name(key, value, match):
    from skillrepro.studies.scaffold.settings import check_training

    paper = {"steps": 10, "optimizer": "adam", "query_batch_size": 16, "global_batch_size": 128,
             "executor_entropy_coef": 0.0, "max_sequence_tokens": 32768, "micro_batch_size": 2}
    check_training(paper, 4, 4, 4)  # table 5's values are honoured
    with pytest.raises(ValueError, match=match):
        check_training({**paper, key: value}, 4, 4, 4)


def test_micro_batches_and_kept_optimizer_states(tmp_path):
    from skillrepro.studies.scaffold.grpo import OPTIMIZER_STATE, prunable_optimizer_states

    assert TrainSettings(queries_per_step=16).accumulation(12) == (192, 1)
    assert TrainSettings(queries_per_step=16, micro_batch_size=2).accumulation(12) == (2, 96)
    for j in range(1, 5):
        (tmp_path / f"ckpt{j}").mkdir()
        (tmp_path / f"ckpt{j}" / OPTIMIZER_STATE).write_bytes(b"x")
    assert [f.parent.name for f in prunable_optimizer_states(tmp_path, 4, 2)] == ["ckpt1", "ckpt2"]
    assert prunable_optimizer_states(tmp_path, 4, 4) == []


def test_config_refuses_a_training_key_before_any_work():
    from skillrepro.studies.scaffold.settings import ScaffoldConfig

    cfg = {"benchmarks": {"babyai": {"env": "babyai"}}, "llm": {"backend": "embedded"},
           "scaffold": {"n_scouts": 4, "n_post": 4, "training": {"query_batch_size": 2, "global_batch_size": 12}}}
    with pytest.raises(ValueError, match="scaffold.training.global_batch_size: 12"):
        ScaffoldConfig.from_config(cfg)
    cfg["scaffold"]["training"]["global_batch_size"] = 16
    assert ScaffoldConfig.from_config(cfg).training["global_batch_size"] == 16


@pytest.mark.integration
def test_a_lora_update_trains_its_adapter_serves_the_merged_model_and_carries_adam_to_the_next(tiny, tmp_path):
    """scaffold.training.adapter: update 1 trains a fresh LoRA adapter on the frozen base; its checkpoint holds the
    adapter, the Adam state of the adapter's parameters alone, and the base merged with the adapter (loadable, changed
    only in the adapted layers). Update 2 starts from that adapter and that Adam state, on the base again."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    from skillrepro.studies.scaffold.grpo import (ADAPTER, OPTIMIZER_STATE, make_trainer, save_checkpoint, train)
    from skillrepro.studies.scaffold.settings import AdapterSettings

    base, tok, seq = tiny
    pristine = copy.deepcopy(base)  # the module's model stays the base: peft adds its layers in place
    samples = assign_advantages(_groups(seq), 2, 0.1)
    settings = TrainSettings(learning_rate=1e-3, adapter=AdapterSettings(4, 8.0, 0.0, ("q_proj", "v_proj")))
    with pytest.raises(ValueError, match="scaffold.training.adapter is not set"):
        make_trainer(copy.deepcopy(pristine), tok, samples, 6, TrainSettings(), tmp_path / "x", steps=1,
                     adapter_from=tmp_path)

    first = make_trainer(copy.deepcopy(pristine), tok, samples, 6, settings, tmp_path / "t1", steps=1)
    trainable = [n for n, p in first.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)  # the base is frozen
    train(first)
    lora_b = [p for n, p in first.model.named_parameters() if "lora_B" in n]
    assert all(p.abs().sum() > 0 for p in lora_b)  # B starts at 0: a step moved every one
    # saving merges the adapter into the base in place: keep what update 1 trained
    first_adapter = {n: p.detach().clone() for n, p in first.model.named_parameters() if p.requires_grad}
    ckpt1 = save_checkpoint(first.model, tok, first.optimizer, tmp_path / "ckpt1", {"update": 1})
    assert (ckpt1 / ADAPTER / "adapter_config.json").is_file()
    adam = torch.load(ckpt1 / OPTIMIZER_STATE, weights_only=True)
    assert len(adam["state"]) == len(trainable)  # the adapter's moments only

    served = AutoModelForCausalLM.from_pretrained(str(ckpt1), dtype=torch.float32)
    merged, original = served.state_dict(), pristine.state_dict()
    assert set(merged) == set(original)  # a full model of the base's own layout, no LoRA layers left
    changed = {n for n in original if not torch.equal(merged[n], original[n])}
    assert changed and all(".q_proj." in n or ".v_proj." in n for n in changed)

    second = make_trainer(copy.deepcopy(pristine), tok, samples, 6, settings, tmp_path / "t2", steps=1,
                          optimizer_state=ckpt1 / OPTIMIZER_STATE, adapter_from=ckpt1 / ADAPTER)
    loaded = {n: p.detach().clone() for n, p in second.model.named_parameters() if p.requires_grad}
    assert loaded.keys() == first_adapter.keys()
    assert all(torch.equal(loaded[n], first_adapter[n]) for n in loaded)  # it continues update 1's adapter
    train(second)
    steps = {float(s["step"]) for s in second.optimizer.state.values()}
    assert steps == {2.0}  # Adam's second step: update 1's moments were carried, not restarted
    assert any(not torch.equal(p.detach(), loaded[n]) for n, p in second.model.named_parameters() if n in loaded)
