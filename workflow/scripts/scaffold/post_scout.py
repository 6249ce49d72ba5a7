"""SkillScaffold: Post-Scout i of every query, with its selected card in the actor's notes or skill-free (4.4);
plain GRPO's chain has no selection and plays every query skill-free."""
import json
from pathlib import Path

from skillrepro.studies.scaffold.records import SelectionRecord, read_rows
from skillrepro.studies.scaffold.rollouts import episode_variant, phase_seed, play
from skillrepro.pipeline import start_job

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
w, p = snakemake.wildcards, snakemake.params
if snakemake.input.selection:
    plan = [(s.task_id, s.card if p.inject else "", episode_variant(w.svariant, "post"))
            for s in read_rows(snakemake.input.selection, SelectionRecord)]
else:  # plain GRPO: no Generator, every query skill-free
    plan = [(t, "", episode_variant(w.svariant, "post")) for t in json.loads(Path(snakemake.input.queries).read_text())]
play(bench=job.settings.bench, llm=phase_seed(job.settings.llm, "post", int(w.i)), library_dir=Path(snakemake.input.library).parent,
     plan=plan, run_id=f"scaffold/{w.sbench}/{w.svariant}", cycle=1,
     out_dir=Path(snakemake.output.episodes).parent, wall_s=p.wall_s, logger=log, policy=job.settings.policy)
