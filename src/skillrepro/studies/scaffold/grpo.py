"""SkillScaffold joint training (seed 002, section 4.5, algorithm 1, equations 3, 11, 12) on TRL.

Long because the rewards and advantages, the TRL trainer and the checkpoint's export for serving make one update.

One shared policy is both Executor and Generator. Per query, the N Scouts and L Post-Scouts form the
Executor's GRPO group (environment rewards), the M cards the Generator's group (rewards from utility,
eq. 11); each group is normalised on its own, and eq. 12 adds the Generator's objective with weight
lambda_gen and its entropy with weight eta_gen.

TRL's GRPOTrainer does the optimisation (clipped token-level ratio, eq. 3, with `loss_type="grpo"`:
per-sequence token mean, then the mean over the batch; `epsilon`/`epsilon_high`; `beta` for KL). It is
given the samples the scaffold rules already produced with the current policy (`rollout_func` returns
them with an `env_mask` that keeps observations, templates and the pre-fill out of the loss), and the
advantages computed here as its rewards with `scale_rewards="none"`: each query's samples sum to zero,
so TRL's group-mean subtraction leaves them unchanged. One query's samples are TRL's group
(`num_generations` = N + L + M).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import gguf
import numpy as np

from skillrepro.config import ConfigError
from skillrepro.llm.models import MODELS, gguf_writer_like, resolve
from skillrepro.llm.scorer import load_gguf
from skillrepro.progress import Progress
from skillrepro.studies.scaffold.settings import CHECKPOINT_GGUF, TrainSettings


ROLES = ("executor", "generator")


def generator_rewards(utilities: Sequence[float], variant: str) -> list[float]:
    """Eq. 11: r_gen = U (grp) or max(0, U) (anc, whose evidence holds only successes)."""
    if variant not in ("grp", "anc"):
        raise ValueError(f"unknown utility variant {variant!r}")
    return [max(0.0, float(u)) if variant == "anc" else float(u) for u in utilities]


def group_normalized(rewards: Sequence[float], eps: float = 1e-4) -> list[float]:
    """GRPO's group-relative advantage: (r - mean) / (std + eps), std with Bessel's correction as in TRL.
    A group whose rewards are all equal gets zero advantages (it carries no relative signal)."""
    r = [float(x) for x in rewards]
    if len(r) < 2:
        return [0.0] * len(r)
    mean = sum(r) / len(r)
    std = math.sqrt(sum((x - mean) ** 2 for x in r) / (len(r) - 1))
    return [(x - mean) / (std + eps) for x in r]


def generator_group_complete(utilities: Sequence[float], valid: Sequence[bool], m: int) -> bool:
    """A Generator group trains only when all M cards are format-valid with a finite utility
    (section 4.5: an incomplete group is omitted; algorithm 1, line 24)."""
    return len(utilities) == m and all(v and math.isfinite(u) for u, v in zip(utilities, valid))


def query_advantages(exec_rewards: Sequence[float], gen_rewards: Sequence[float] | None, m: int,
                     lambda_gen: float) -> tuple[list[float], list[float]]:
    """Per-sample weights for one query such that TRL's flat mean over a batch of G = N+L+M samples per
    query equals eq. 12's per-query objective, (1/(N+L)) sum_exec A + lambda_gen (1/M) sum_gen A:
    Executor advantages are scaled by G/(N+L), Generator ones by lambda_gen G/M. `gen_rewards` None (an
    omitted Generator group, or no Generator learning): its M samples get 0 and contribute no gradient."""
    g = len(exec_rewards) + m
    a_exec = [a * g / len(exec_rewards) for a in group_normalized(exec_rewards)]
    if gen_rewards is None or lambda_gen == 0:
        return a_exec, [0.0] * m
    if len(gen_rewards) != m:
        raise ValueError(f"{len(gen_rewards)} Generator rewards for a group of {m}")
    return a_exec, [lambda_gen * a * g / m for a in group_normalized(gen_rewards)]


@dataclass
class Sample:
    """One trajectory or card as TRL trains on it. `mask` marks completion tokens the policy produced."""

    query: str
    role: str  # executor | generator
    prompt_ids: list[int]
    completion_ids: list[int]
    mask: list[int]
    reward: float  # the environment reward (executor) or eq. 11's reward (generator), for the record
    advantage: float = 0.0


def conversation_sample(sequencer: Any, messages: Sequence[dict[str, Any]], query: str, role: str, reward: float,
                        skip_chars: int = 0) -> Sample:
    """Tokenise `messages` with the chat template; the completion starts at the first assistant token.
    `skip_chars`: characters at the start of each assistant body that the policy did not write (the
    Generator's pre-fill), kept out of the mask."""
    text, spans = sequencer.spans(messages)
    enc = sequencer.tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    # A token is the policy's when it lies in an assistant body and reaches past the skipped pre-fill
    # (re-tokenising can merge the pre-fill's last character with the model's first token).
    own = [any(a <= s < b and e > a + skip_chars for a, b in spans) and e > s for s, e in offsets]
    if not any(own):
        raise ValueError(f"query {query}: the {role} conversation has no token written by the policy")
    first = own.index(True)
    if first == 0:
        raise ValueError(f"query {query}: the conversation has no prompt before the policy's first token")
    # The template's end-of-turn after each assistant body is the policy's too (it ends its turn).
    mask = [1 if o else 0 for o in own[first:]]
    return Sample(query, role, list(ids[:first]), list(ids[first:]), mask, reward)


@dataclass
class QueryGroup:
    """Everything one query contributes to an update."""

    query: str
    executor: list[Sample]
    generator: list[Sample]
    utilities: list[float]
    valid: list[bool]
    variant: str = "grp"
    trainable_generator: bool = field(init=False, default=False)


def assign_advantages(groups: Sequence[QueryGroup], m: int, lambda_gen: float, generator_learning: bool = True
                      ) -> list[Sample]:
    """Eq. 11-12 advantages on every sample, in query order (executor samples, then generator samples)."""
    out = []
    for q in groups:
        if len(q.generator) not in (0, m):
            raise ValueError(f"query {q.query}: {len(q.generator)} card samples, expected 0 or M={m}")
        q.trainable_generator = bool(q.generator) and generator_learning and generator_group_complete(
            q.utilities, q.valid, m)
        rewards = generator_rewards(q.utilities, q.variant) if q.trainable_generator else None
        a_exec, a_gen = query_advantages([s.reward for s in q.executor], rewards, m, lambda_gen)
        for s, a in zip(q.executor, a_exec):
            s.advantage = a
        gens = q.generator or [_empty_like(q.executor[0], q.query) for _ in range(m)]
        for s, a, r in zip(gens, a_gen, rewards or [0.0] * m):
            s.advantage, s.reward = a, r
        out += q.executor + gens
    return out


def _empty_like(s: Sample, query: str) -> Sample:
    """A placeholder card sample for a query without cards (anc with no success): one masked token, so
    every TRL group has N+L+M rows; it adds nothing to the loss."""
    return Sample(query, "generator", s.prompt_ids, s.completion_ids[:1], [0], 0.0)


def load_policy(model: str) -> tuple[Any, Any]:
    """(model, tokenizer) to train: a shipped model name or .gguf file (dequantised to float32, as the CPU
    scorer loads it) or a Hugging Face model folder / id (GPU scale)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if model in MODELS or model.endswith(".gguf"):
        return load_gguf(resolve(model))
    return AutoModelForCausalLM.from_pretrained(model, dtype="auto"), AutoTokenizer.from_pretrained(model)


OPTIMIZER_STATE = "optimizer.pt"  # Adam's moments, carried from one checkpoint's update to the next
# A LoRA update's adapter (scaffold.training.adapter), in a folder of its own: transformers would read an
# adapter_config.json at the checkpoint's top as an adapter to load, and vLLM serves the merged weights there.
ADAPTER = "adapter"


def with_adapter(model: Any, settings: TrainSettings, adapter_from: str | Path | None = None) -> Any:
    """`model` (the frozen base policy) as a peft model whose LoRA adapter trains: a fresh one (B = 0: the first
    update starts at the base policy) or, `adapter_from`, the previous update's, so that an update continues the
    last one's adapter as full fine-tuning continues its weights. peft keeps the adapter in float32 beside a bf16
    base (autocast_adapter_dtype), so Adam's small steps are not rounded away."""
    from peft import LoraConfig, PeftModel, get_peft_model

    a = settings.adapter
    if a is None:
        raise ValueError("with_adapter needs scaffold.training.adapter")
    if adapter_from is not None:
        return PeftModel.from_pretrained(model, str(adapter_from), is_trainable=True)
    return get_peft_model(model, LoraConfig(r=a.rank, lora_alpha=a.alpha, lora_dropout=a.dropout,
                                            target_modules=list(a.target_modules), bias="none",
                                            task_type="CAUSAL_LM"))


def keep_freed_memory() -> None:
    """Keep the memory this process frees in its heap instead of handing it back to the kernel (glibc only).

    glibc gives every freed block over 32 MB straight back (one 533-token sequence's float32 logits over
    SmolLM2's 49k vocabulary are 105 MB) and trims the heap's top; the kernel zeroes each page again on its
    next touch. A GRPO update on 2 cores took 4 M page faults and 90 s that way, 1.2 M and 64-70 s with this.
    The price: the process holds its peak until it exits, which a training job does anyway."""
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    if not hasattr(libc, "mallopt"):  # musl, macOS: nothing to tune
        return
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    m_trim_threshold, m_mmap_max = -1, -4  # glibc's <malloc.h>
    libc.mallopt(m_mmap_max, 0)
    libc.mallopt(m_trim_threshold, 2**31 - 1)


def make_trainer(model: Any, tokenizer: Any, samples: Sequence[Sample], group_size: int, settings: TrainSettings,
                 out_dir: str | Path, steps: int, use_cpu: bool = True, optimizer_state: str | Path | None = None,
                 temperature: float = 1.0, adapter_from: str | Path | None = None) -> Any:
    """A TRL GRPOTrainer that trains `model` on `samples` (consecutive groups of `group_size` per query)
    for `steps` optimizer steps. `optimizer_state`: the previous update's Adam state (one run of algorithm 1
    is one optimizer; each update is a job of its own here). `temperature`: the one the samples were drawn at;
    TRL divides the logits by it before it takes the log-probs of the ratio, so they are the sampling policy's.
    With settings.adapter, `model` is the base policy and a LoRA adapter trains on it (`with_adapter`: the previous
    update's, `adapter_from`, or a fresh one); the trainer's model is then the peft model."""
    import os

    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if use_cpu:
        keep_freed_memory()
    queries = list(dict.fromkeys(s.query for s in samples))
    by_query = {q: [s for s in samples if s.query == q] for q in queries}
    bad = {q: len(v) for q, v in by_query.items() if len(v) != group_size}
    if bad:
        raise ValueError(f"every query needs {group_size} samples (N+L+M); got {bad}")

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        # TRL repeats each dataset row `num_generations` times in a row: hand out that query's samples.
        taken: dict[str, int] = {}
        rows = []
        for p in prompts:
            k = taken.get(p, 0)
            rows.append(by_query[p][k % group_size])
            taken[p] = k + 1
        trainer._scaffold_roles = torch.tensor([r.role == "generator" for r in rows])
        return {"prompt_ids": [r.prompt_ids for r in rows], "completion_ids": [r.completion_ids for r in rows],
                "logprobs": [[0.0] * len(r.completion_ids) for r in rows], "env_mask": [r.mask for r in rows],
                "advantage": [r.advantage for r in rows]}

    def advantage_reward(prompts, completions, advantage, **_):
        return list(advantage)

    if settings.max_sequence_tokens:
        long = [(s.query, s.role, len(s.prompt_ids) + len(s.completion_ids)) for s in samples
                if len(s.prompt_ids) + len(s.completion_ids) > settings.max_sequence_tokens]
        if long:
            raise ConfigError(f"config key scaffold.training.max_sequence_tokens: {len(long)} samples are longer than "
                              f"{settings.max_sequence_tokens} tokens, e.g. {long[0]}")
    micro, accumulate = settings.accumulation(group_size)
    cfg = GRPOConfig(
        output_dir=str(out_dir), max_steps=steps, learning_rate=settings.learning_rate, lr_scheduler_type="constant",
        adam_beta1=settings.adam_betas[0], adam_beta2=settings.adam_betas[1], weight_decay=0.0,
        per_device_train_batch_size=micro, gradient_accumulation_steps=accumulate, num_generations=group_size,
        loss_type="grpo", scale_rewards="none", beta=settings.kl_coef, epsilon=settings.clip_low,
        epsilon_high=settings.clip_high, num_iterations=1, max_completion_length=max(len(s.completion_ids) for s in samples),
        use_cpu=use_cpu, bf16=False, report_to="none", logging_steps=1, save_strategy="no", seed=0, temperature=temperature,
        dataloader_num_workers=0, remove_unused_columns=False,
        gradient_checkpointing=not use_cpu,  # memory for an 8B policy on a GPU; only time on a tiny CPU one
    )
    data = Dataset.from_list([{"prompt": q} for q in queries])
    if settings.adapter is not None:
        model = with_adapter(model, settings, adapter_from)
    elif adapter_from is not None:
        raise ValueError("an adapter to continue was given, but scaffold.training.adapter is not set")
    # Adam with weight decay 0, as table 5 (AdamW's decoupled decay is then plain Adam), over what trains: every
    # parameter, or the adapter's alone (its state is then the adapter's, in the same order in every update).
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings.learning_rate,
                                  betas=settings.adam_betas, weight_decay=0.0)
    if optimizer_state is not None:
        optimizer.load_state_dict(torch.load(optimizer_state, weights_only=True))
    trainer = _trainer_class()(model=model, reward_funcs=advantage_reward, args=cfg, train_dataset=data,
                                   processing_class=tokenizer, rollout_func=rollout, optimizers=(optimizer, None))
    trainer.generator_entropy_coef = settings.generator_entropy_coef
    trainer.executor_entropy_coef = settings.executor_entropy_coef
    return trainer


def train(trainer: Any) -> None:
    """`trainer.train()` with its progress on the console: micro-batches (forward and backward passes) done of
    the update's optimizer steps x gradient accumulation. An update job is one optimizer step over every sequence of
    its query batch; its micro-batches are what moves meanwhile."""
    steps, accumulate = trainer.args.max_steps, trainer.args.gradient_accumulation_steps
    with Progress(steps * accumulate, f"micro-batches ({accumulate} per optimizer step, {steps} steps)") as progress:
        trainer.add_callback(progress_callback(progress))
        trainer.train()


def progress_callback(progress: Progress) -> Any:
    """A transformers TrainerCallback that counts each finished micro-batch on `progress` (the Trainer calls
    on_substep_end after each accumulated one, on_step_end after the one that steps the optimizer)."""
    from transformers import TrainerCallback

    class ProgressCallback(TrainerCallback):
        def on_substep_end(self, args, state, control, **kwargs):
            progress.update()

        def on_step_end(self, args, state, control, **kwargs):
            progress.update()

    return ProgressCallback()


def _trainer_class() -> type:
    """Built on first use, so importing this module needs no TRL."""
    from trl import GRPOTrainer

    class ScaffoldGRPOTrainer(GRPOTrainer):
        """GRPOTrainer plus eq. 12's Generator entropy term, which TRL's own `entropy_coef` cannot express
        (it acts on every token, and the Executor's entropy coefficient is 0 in table 5)."""

        generator_entropy_coef = 0.0
        executor_entropy_coef = 0.0

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            out["scaffold_generator"] = self._scaffold_roles.to(out["completion_ids"].device)
            return out

        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            logps, entropies, aux = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            self._scaffold_entropies = entropies
            return logps, entropies, aux

        def _compute_loss(self, model, inputs):
            loss = super()._compute_loss(model, inputs)
            ent = getattr(self, "_scaffold_entropies", None)
            if ent is None or "scaffold_generator" not in inputs:
                return loss
            mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
            is_gen = inputs["scaffold_generator"].unsqueeze(1).to(mask.dtype)
            # eq. 12's entropy bonus per role: the mean token entropy of that role's own tokens
            for coef, role_mask in ((self.generator_entropy_coef, mask * is_gen),
                                    (self.executor_entropy_coef, mask * (1 - is_gen))):
                if coef and role_mask.sum() > 0:
                    h = (ent * role_mask).sum() / role_mask.sum()
                    loss = loss - coef * h / self.current_gradient_accumulation_steps
            return loss

    return ScaffoldGRPOTrainer


def save_checkpoint(model: Any, tokenizer: Any, optimizer: Any, out_dir: str | Path, meta: dict[str, Any],
                    base_gguf: str | Path | None = None) -> Path:
    """The trained policy as a Hugging Face folder (vLLM serves it) with its optimizer state; with `base_gguf`
    (a policy first loaded from GGUF), also as CHECKPOINT_GGUF in that layout, for llama.cpp and the CPU scorer.
    A peft model (scaffold.training.adapter) writes its adapter to ADAPTER, which the next update continues, and
    the base merged with it as the folder's full model, which is what every later job serves and scores."""
    import torch

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "merge_and_unload"):  # a peft model: the adapter first, the merge changes the base in place
        model.save_pretrained(out / ADAPTER)
        model = model.merge_and_unload()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    torch.save(optimizer.state_dict(), out / OPTIMIZER_STATE)
    if base_gguf is not None:
        export_gguf(model, base_gguf, out / CHECKPOINT_GGUF)
    (out / "scaffold_update.json").write_text(json.dumps(meta, indent=1))
    return out


def prunable_optimizer_states(grpo_dir: str | Path, k: int, keep: int) -> list[Path]:
    """The Adam states under `grpo_dir` (ckpt{j}/optimizer.pt) older than the last `keep` checkpoints up to k."""
    return [f for j in range(1, k - keep + 1) if (f := Path(grpo_dir) / f"ckpt{j}" / OPTIMIZER_STATE).exists()]


def export_gguf(model: Any, base_gguf: str | Path, out: str | Path) -> Path:
    """Write `model`'s weights into a copy of `base_gguf` (its metadata, tokenizer and tensor list): matrices
    in F16, vectors in F32. The inverse of transformers' GGUF loading, including llama's q/k row order."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    reader = gguf.GGUFReader(str(base_gguf))
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf_writer_like(reader, out, gguf.LlamaFileType.MOSTLY_F16)
    state = model.state_dict()
    names = gguf.get_tensor_name_map(next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch),
                                     model.config.num_hidden_layers)
    to_hf = {}
    for hf_name in state:
        stem, _, suffix = hf_name.rpartition(".")
        if (g := names.get_name(stem)) is not None:
            to_hf[f"{g}.{suffix}"] = hf_name
    cfg = model.config
    for t in reader.tensors:
        if t.name not in to_hf:
            raise ValueError(f"{base_gguf}: tensor {t.name} has no counterpart in the trained model")
        w = state[to_hf[t.name]].detach().float().cpu().numpy()
        if arch == "llama" and (".attn_q." in t.name or ".attn_k." in t.name):
            # llama.cpp stores llama's q/k rows interleaved per head (transformers undoes it on load)
            heads = cfg.num_attention_heads if ".attn_q." in t.name else cfg.num_key_value_heads
            w = w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
        writer.add_tensor(t.name, w.astype(np.float16 if w.ndim == 2 else np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(out)


def load_served(checkpoint: str | Path) -> tuple[Any, Any]:
    """(model, tokenizer) of a checkpoint as its CHECKPOINT_GGUF holds it (export_gguf: matrices rounded to F16,
    vectors F32), read from the checkpoint's own Hugging Face folder: the same numbers transformers reads from
    the GGUF (test_scaffold_training holds them equal), without its pure-Python read of the GGUF's metadata
    (about 25 s for SmolLM2-135M on 2 cores, in every scoring job of a training iteration)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lm = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32)
    with torch.no_grad():
        for w in lm.parameters():  # tied weights once
            if w.ndim == 2:
                w.copy_(w.half().float())
    return lm, AutoTokenizer.from_pretrained(str(checkpoint))


def exported_checkpoint(gguf_path: str | Path) -> Path | None:
    """The checkpoint folder a CHECKPOINT_GGUF was exported from (save_checkpoint wrote both), else None."""
    p = Path(gguf_path)
    if not p.as_posix().endswith("/" + CHECKPOINT_GGUF):
        return None
    folder = p.parents[len(Path(CHECKPOINT_GGUF).parts) - 1]
    written = (folder / "scaffold_update.json").is_file() and (folder / "model.safetensors").is_file()
    return folder if written else None


def groups_from_records(sequencer: Any, variant: str, m: int, scouts: Sequence[Any], posts: Sequence[Any],
                        candidates: Sequence[Any], utilities: Sequence[Any], generator_calls: Any) -> list[QueryGroup]:
    """One QueryGroup per query: Scouts and Post-Scouts (Trajectory) as the Executor's samples, the cards
    (CandidateRecord, with the request each came from in `generator_calls`) as the Generator's."""
    prompts = dict(zip(generator_calls.call_id, generator_calls.prompt)) if len(generator_calls) else {}
    util = {(u.task_id, u.candidate): u.utility for u in utilities}
    groups = []
    for task in sorted({t.task_id for t in scouts}):
        execs = [conversation_sample(sequencer, t.messages, task, "executor", float(t.success))
                 for t in list(scouts) + list(posts) if t.task_id == task]
        cards = sorted((c for c in candidates if c.task_id == task), key=lambda c: c.candidate)
        gens = []
        for c in cards:
            msgs = json.loads(prompts[c.call_id])["messages"]
            prefill = ""
            if msgs and msgs[-1]["role"] == "assistant":  # the pre-fill (its form's opening): the card starts with it
                prefill, msgs = msgs[-1]["content"], msgs[:-1]
            skip = len(prefill) if c.raw.startswith(prefill) else 0
            gens.append(conversation_sample(sequencer, msgs + [{"role": "assistant", "content": c.raw}], task,
                                            "generator", 0.0, skip_chars=skip))
        groups.append(QueryGroup(task, execs, gens, [util.get((task, c.candidate), math.nan) for c in cards],
                                 [c.valid for c in cards], variant))
    return groups
