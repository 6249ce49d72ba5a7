"""SkillScaffold held-out evaluation: one policy (the base model or a GRPO checkpoint) plays every held-out task of a
benchmark skill-free, `heldout.rollouts` times (the deployment of section 4: no Generator, no skill); base-skill, the
direct-skill-prompting baseline, is the base model with the card of `scaffold.heldout.skills` in its notes."""
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from skillrepro.pipeline import start_job
from skillrepro.store import write_table
from skillrepro.studies.scaffold.heldout import heldout_variant
from skillrepro.studies.scaffold.rollouts import phase_seed, play, policy_server

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
i, p, w = snakemake.input, snakemake.params, snakemake.wildcards
tasks = json.loads(Path(i.tasks).read_text())
cards = [i.card] if isinstance(i.card, str) else list(i.card)
card = Path(cards[0]).read_text().strip() if cards else ""  # skill-free unless base-skill
out = Path(snakemake.output.episodes).parent
parts = []
with policy_server(job.settings.llm, job.settings.policy):  # one server for every rollout of a checkpoint
    for r in range(p.rollouts):
        plan = [(t, card, heldout_variant(split, r)) for split, ts in tasks.items() for t in ts]
        parts.append(play(bench=job.settings.bench, llm=phase_seed(job.settings.llm, "heldout", r), library_dir=Path(i.library).parent,
                          plan=plan, run_id=f"scaffold/{w.hbench}/heldout/{w.hpolicy}", cycle=r,
                          out_dir=out / f"rollout{r}", wall_s=p.wall_s, logger=log, split="test"))
table = pa.concat_tables([pq.read_table(d / "episodes.parquet") for d in parts])
write_table(snakemake.output.episodes, table)
log.info("%s: %d held-out episodes, %d successes", w.hpolicy, table.num_rows,
         sum(table.column("success").to_pylist()))
