"""SkillScaffold validation: skill-free evaluation rollout i of every query (evaluation only, never scored)."""
import json
from pathlib import Path

from skillrepro.studies import scaffold as ss
from skillrepro.pipeline import setup_logging

log = setup_logging(snakemake)
w, p = snakemake.wildcards, snakemake.params
plan = [(t, "", ss.episode_variant("", "eval_free")) for t in json.loads(Path(snakemake.input.queries).read_text())]
ss.play(bench=p.bench, llm=ss.phase_seed(p.llm, "eval", int(w.i)), library_dir=Path(snakemake.input.library).parent,
        plan=plan, run_id=f"scaffold/{w.sbench}", cycle=2, out_dir=Path(snakemake.output.episodes).parent,
        wall_s=p.wall_s, logger=log, policy=p.policy)
