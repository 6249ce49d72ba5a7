"""SkillScaffold internalization (table 4): the fixed cohort of a chain's early iterations (the queries that
skill-assisted exploration helped, chosen on their Scouts and Post-Scouts), played skill-free N times each.
Rule scaffold_cohort_early: by the checkpoint that chose it, on fresh rollouts (the early success);
rule scaffold_cohort_eval: by a later checkpoint; rule scaffold_cohort_control: by plain GRPO's checkpoint of the same
index (table 4's control; params.played_by)."""
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from skillrepro.pipeline import start_job
from skillrepro.store import write_table
from skillrepro.studies.scaffold.cohort import chain_cohort
from skillrepro.studies.scaffold.rollouts import phase_seed, play
from skillrepro.studies.scaffold.paths import Instance

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
i, p, w = snakemake.input, snakemake.params, snakemake.wildcards
by_iter: dict[int, tuple[list[str], list[str]]] = {}
for f in i.selections:
    by_iter.setdefault(Instance.of(f).iteration, ([], []))[0].append(f)
for f in i.post:
    by_iter.setdefault(Instance.of(f).iteration, ([], []))[1].append(f)
read = lambda files: pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)  # noqa: E731
members = chain_cohort({j: (read(s), read(po)) for j, (s, po) in by_iter.items()})
cohort = sorted({t for _, t in members})
log.info("cohort of %d members (%d queries): %s", len(members), len(cohort), members)
ckpt = getattr(w, "k", None)
out = Path(snakemake.output.episodes).parent
parts = [play(bench=job.settings.bench, llm=phase_seed(job.settings.llm, "cohort", r), library_dir=Path(i.library).parent,
              plan=[(t, "", "cohort/free") for t in cohort],
              run_id=f"scaffold/{w.sbench}/{w.svariant}/" + (f"ckpt{ckpt}" if ckpt else "cohort_early")
              + (f"/{p.played_by}" if hasattr(p, "played_by") else ""),
              cycle=int(ckpt) if ckpt else Instance.named(w.sbench).iteration, out_dir=out / f"rollout{r}", wall_s=p.wall_s, logger=log,
              policy=job.settings.policy)
         for r in range(p.rollouts)]
write_table(snakemake.output.episodes, pa.concat_tables([pq.read_table(d / "episodes.parquet") for d in parts]))
