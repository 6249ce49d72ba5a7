"""SkillScaffold: GRPO update k of the shared policy (algorithm 1, eq. 3, 11, 12) on TRL, from iteration k-1 of
its chain: Scouts + Post-Scouts train the Executor, the cards (rewarded by utility) the Generator. Writes
checkpoint k (weights, tokenizer, Adam state; and GGUF for llama.cpp when the policy came from GGUF; with
scaffold.training.adapter also the LoRA adapter, the weights being the base merged with it)."""
from pathlib import Path

import pandas as pd
import torch

from skillrepro.llm.models import MODELS, resolve
from skillrepro.llm.scorer import ChatSequencer
from skillrepro.pipeline import start_job
from skillrepro.studies.scaffold.grpo import (ADAPTER, OPTIMIZER_STATE, assign_advantages, groups_from_records, load_policy,
                                              make_trainer, prunable_optimizer_states, save_checkpoint, train)
from skillrepro.studies.scaffold.paths import Instance
from skillrepro.studies.scaffold.records import CandidateRecord, UtilityRecord, load_trajectories, read_rows
from skillrepro.studies.scaffold.selection import paired_utilities
from skillrepro.studies.scaffold.settings import TrainSettings

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
i, p, w = snakemake.input, snakemake.params, snakemake.wildcards
out = Path(snakemake.output[0])
chain = job.settings.scaffold.chain(w.svariant)  # its own switches: table 3's training ablations; plain GRPO has neither
settings = TrainSettings.from_config({**job.settings.scaffold.training, "generator_learning": chain.generator_learning})
previous = Path(i.policy) if i.policy else None
# A LoRA update (scaffold.training.adapter) trains the previous update's adapter on the frozen base model, not on
# the previous checkpoint's merged weights: merging each update into bf16 weights would round its small steps away.
adapter_from = previous / ADAPTER if previous and settings.adapter else None
if adapter_from is not None and not (adapter_from / "adapter_config.json").is_file():
    raise SystemExit(f"scaffold.training.adapter is set, but checkpoint {previous} has no LoRA adapter ({adapter_from}): "
                     "it was trained without one; remove the chain's checkpoints to retrain it with the adapter")
model, tok = load_policy(p.base_model if settings.adapter or not previous else str(previous))
# a policy that starts from GGUF is served by llama.cpp: every checkpoint is written back in that layout
base_gguf = resolve(p.base_model) if p.base_model in MODELS or p.base_model.endswith(".gguf") else None
# plain GRPO (no cards): the Executor's group alone
cards = read_rows(i.candidates, CandidateRecord) if i.candidates else []
utilities = read_rows(i.utilities, UtilityRecord) if i.utilities else []
# the Generator is rewarded by the utilities its chain's selection paired with its cards (table 3's shuffled
# ablation breaks that pairing for selection and rewards alike)
utilities = paired_utilities(Instance(w.sbench, w.svariant, int(w.k) - 1).name, w.svariant, cards, utilities, job.settings.scaffold.threshold,
                             chain.selection, chain.gate)
groups = groups_from_records(
    ChatSequencer(tok), chain.of or "grp", p.m,
    load_trajectories(Path(f).parent for f in i.scouts), load_trajectories(Path(f).parent for f in i.post),
    cards, utilities,
    pd.read_parquet(i.generator_calls) if i.generator_calls else pd.DataFrame(columns=["call_id", "prompt"]))
samples = assign_advantages(groups, p.m, settings.lambda_gen, settings.generator_learning)
log.info("update %s from %s: %d queries, %d samples; Generator groups trained: %d; torch threads: %d", w.k,
         previous or p.base_model, len(groups), len(samples), sum(g.trainable_generator for g in groups),
         torch.get_num_threads())
if job.settings.generator_llm.temperature != job.settings.llm.temperature:
    log.warning("the Generator samples at temperature %s, the Executor at %s: the update takes every sample's "
                "log-probs at the Executor's", job.settings.generator_llm.temperature, job.settings.llm.temperature)
trainer = make_trainer(model, tok, samples, p.group_size, settings, out.parent / f".trl{w.k}", steps=1,
                       use_cpu=p.use_cpu, optimizer_state=previous / OPTIMIZER_STATE if previous else None,
                       temperature=job.settings.llm.temperature, adapter_from=adapter_from)
train(trainer)  # micro-batches done of N on the console
log.info("TRL log: %s", trainer.state.log_history)
# the trainer's model: the policy itself, or the peft model whose adapter and merged weights the checkpoint holds
save_checkpoint(trainer.model, tok, trainer.optimizer, out, {"settings": repr(settings), "update": int(w.k),
                                                     "from": str(previous or p.base_model),
                                                     "queries": [g.query for g in groups]}, base_gguf=base_gguf)
keep = job.settings.scaffold.training.get("keep_optimizer_states")
if keep:  # only the last `keep` checkpoints keep their Adam state (update k reads checkpoint k-1's)
    for old in prunable_optimizer_states(out.parent, int(w.k), int(keep)):
        log.info("keep_optimizer_states=%s: removing %s", keep, old)
        old.unlink()
