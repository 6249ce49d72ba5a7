"""SkillScaffold figure 1 (empirical summary: held-out skill-free success of the base model, plain GRPO and each
SkillScaffold chain, with the share of training queries that got a skill) and figure 7 (training success-rate
curves: each iteration's skill-free Scouts, raw and smoothed, beside held-out success per checkpoint); figure 6 (and
9-12 on the other benchmarks) during training: Scout vs Post-Scout success and the injection and positive-utility
rates per Scout-group kind and iteration; figure 8: the training-time injection rate per iteration."""
import pandas as pd

from skillrepro.pipeline import start_job
from skillrepro.studies.scaffold.figures import figure1, figure6, figure7, figure8

log = start_job(snakemake).log
i, o = snakemake.input, snakemake.output
# the base model's chain is "" (kept as a string so that it groups like any chain)
held = pd.read_csv(i.heldout, keep_default_na=False)
pooled = held[(held.split == "all") & (held.category == "all")]
benches = sorted(pooled.benchmark.unique())
exploration = pd.read_csv(i.exploration, keep_default_na=False)
figure1(pooled, pd.read_csv(i.injection, keep_default_na=False), benches, o.figure1)
figure6(exploration, o.figure6)
figure7(pooled, pd.read_csv(i.curve, keep_default_na=False), benches, o.figure7)
figure8(exploration, benches, o.figure8)
log.info("figures for %s", benches)
