"""SkillScaffold table 4: later-minus-early skill-free success on each chain's fixed early cohort, per later
checkpoint, with a 95 % query-level interval where the cohort has enough queries for one (column `interval`).
The cohort is chosen on the Scouts and Post-Scouts of the chain's first `training.cohort_iterations` iterations;
its early success comes from fresh skill-free rollouts by the checkpoint that chose it (scaffold_cohort_early),
never from those Scouts. With plain GRPO trained, two control rows per checkpoint: plain GRPO's checkpoint of the same
index on the same cohort (its recovery from the same early success) and SkillScaffold minus plain GRPO, the paired
per-query difference of their later skill-free success (the early success cancels)."""
import pandas as pd

from skillrepro.pipeline import start_job
from skillrepro.store import write_text
from skillrepro.studies.scaffold.cohort import chain_cohort, internalization, later_difference
from skillrepro.studies.scaffold.paths import CohortEval, Instance

log = start_job(snakemake).log
i = snakemake.input


def by_chain(files, cohort_evaluations=False):
    """{(benchmark, chain): {j: files}}, j a training iteration's (files under its instance folder) or, with
    `cohort_evaluations`, the checkpoint that played the cohort."""
    out: dict[tuple[str, str], dict[int, list[str]]] = {}
    for f in files:
        if cohort_evaluations:
            ev = CohortEval.of(f)
            chain, j = (ev.bench, ev.chain), ev.k
        else:
            inst = Instance.of(f)
            chain, j = (inst.bench, inst.chain), inst.iteration
        out.setdefault(chain, {}).setdefault(j, []).append(f)
    return out


read = lambda files: pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)  # noqa: E731
selections, post, scouts = by_chain(i.selections), by_chain(i.post), by_chain(i.scouts)
early, later, control = by_chain(i.early), by_chain(i.later, True), by_chain(i.control, True)
rows = []
for chain in sorted(selections):
    members = chain_cohort({j: (read(selections[chain][j]), read(post[chain][j])) for j in selections[chain]})
    early_eps = pd.concat([read(fs).assign(iteration=j) for j, fs in early[chain].items()], ignore_index=True)
    chosen_on = pd.concat([read(fs) for d in (scouts, post) for fs in d[chain].values()]).episode_id.tolist()
    for k in sorted(later.get(chain, {})):
        lt = read(later[chain][k])
        found = [("SkillScaffold", internalization(early_eps, lt, members, chosen_on=chosen_on,
                                                   interval=snakemake.params.interval))]
        if k in control.get(chain, {}):
            grpo = read(control[chain][k])
            found += [("plain GRPO (control)", internalization(early_eps, grpo, members, chosen_on=chosen_on,
                                                               interval=snakemake.params.interval)),
                      ("SkillScaffold minus plain GRPO", later_difference(lt, grpo, members,
                                                                          interval=snakemake.params.interval))]
        for policy, r in found:
            rows.append({"benchmark": chain[0], "variant": chain[1], "checkpoint": k, "n": r.n_queries,
                         "recovery_pp": r.recovery_pp, "ci_low": r.ci_low, "ci_high": r.ci_high,
                         "interval": r.interval, "policy": policy})
            log.info("%s: %s", chain, rows[-1])
table = pd.DataFrame(rows, columns=["benchmark", "variant", "checkpoint", "n", "recovery_pp", "ci_low", "ci_high",
                                   "interval", "policy"])
write_text(snakemake.output[0], table.to_csv(index=False))
