"""SkillScaffold: one GRPO update of the shared policy (algorithm 1, eq. 3, 11, 12) on TRL, from one scaffold
iteration's records: Scouts + Post-Scouts train the Executor, the cards (rewarded by utility) the Generator."""
from pathlib import Path

import pandas as pd

from skillrepro.llm.scorer import ChatSequencer
from skillrepro.pipeline import setup_logging
from skillrepro.studies import scaffold as ss
from skillrepro.studies import scaffold_grpo as sg

log = setup_logging(snakemake)
i, p, w = snakemake.input, snakemake.params, snakemake.wildcards
settings = sg.TrainSettings.from_config(p.training)
model, tok = sg.load_policy(p.model)
groups = sg.groups_from_records(
    ChatSequencer(tok), w.svariant, p.m,
    ss.load_trajectories(Path(f).parent for f in i.scouts), ss.load_trajectories(Path(f).parent for f in i.post),
    ss.read_rows(i.candidates, ss.CandidateRecord), ss.read_rows(i.utilities, ss.UtilityRecord),
    pd.read_parquet(i.generator_calls))
samples = sg.assign_advantages(groups, p.m, settings.lambda_gen, settings.generator_learning)
log.info("%d queries, %d samples; Generator groups trained: %d", len(groups), len(samples),
         sum(g.trainable_generator for g in groups))
trainer = sg.make_trainer(model, tok, samples, p.group_size, settings, Path(snakemake.output[0]).parent / "trl",
                          steps=p.steps, use_cpu=p.use_cpu)
trainer.train()
log.info("TRL log: %s", trainer.state.log_history)
sg.save_checkpoint(model, tok, snakemake.output[0], {"settings": repr(settings), "steps": p.steps,
                                                    "queries": [g.query for g in groups]})
