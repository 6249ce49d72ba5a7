"""SkillScaffold held-out tables: success per split and category for every policy (long form), tables 1, 2, 3
(followed by the paper's own rows, column `source`) and 6 from it, figure 7's training curve (each iteration's skill-free Scouts) and figure 1's injection rates."""
import pandas as pd

from skillrepro.pipeline import start_job
from skillrepro.store import write_text
from skillrepro.studies.scaffold.heldout import (BASE_METHOD, DIRECT_METHOD, heldout_table, injection_rates, table_by_category,
                                                 table_by_split, table_pass_at_k, table_variants, training_curve,
                                                 training_exploration)
from skillrepro.studies.scaffold import paper
from skillrepro.studies.scaffold.paper import with_paper_rows
from skillrepro.studies.scaffold.paths import DIRECT, HeldoutPolicy, Instance
from skillrepro.studies.scaffold.settings import Chain

log = start_job(snakemake).log
i, p = snakemake.input, snakemake.params
chains = [Chain(**c) for c in p.chains]
label = {c.name: c.method for c in chains} | {DIRECT: DIRECT_METHOD}


eps = []
for f in i.episodes:
    pol = HeldoutPolicy.of(f)
    e = pd.read_parquet(f)
    if not (e.benchmark == pol.bench).all() or not (e.split == "test").all():
        raise ValueError(f"{f}: held-out episodes of another benchmark or not of split test")
    eps.append(e.assign(chain=pol.chain, checkpoint=pol.k, method=label.get(pol.chain, BASE_METHOD)))
episodes = pd.concat(eps, ignore_index=True)
# The base model is checkpoint 0 of every chain: its rows stand at checkpoint 0 of each chain's curve too.
table = heldout_table(episodes, p.envs, chains)
# Tables 1-3: the rows run here, then the paper's own rows for every method (most are not run here), marked so.
tables = {"heldout": table, "table1": with_paper_rows(table_by_category(table), paper.table1_rows()),
          "table2": with_paper_rows(table_by_split(table), paper.table2_rows()),
          "table3": with_paper_rows(table_variants(table, chains, episodes), paper.table3_rows()),
          "table6": table_pass_at_k(episodes)}


def read_iteration(path: str) -> pd.DataFrame:
    """A training iteration's records with its chain, iteration and benchmark (the records name its instance,
    babyai@grp3, as their benchmark)."""
    inst = Instance.of(path)
    return pd.read_parquet(path).assign(chain=inst.chain, iteration=inst.iteration, benchmark=inst.bench)


scouts = pd.concat([read_iteration(f) for f in i.scouts], ignore_index=True)
tables["curve"] = training_curve(scouts)
# A chain that does not inject (table 3's "w/o injection", plain GRPO) selects but plays its Post-Scouts skill-free.
inject = {c.name: c.inject for c in chains}
sel = [read_iteration(f) for f in i.selections]
sel = pd.concat(sel, ignore_index=True) if sel else pd.DataFrame(columns=["benchmark", "chain", "selected"])
sel = sel.assign(selected=[s if inject[c] else -1 for s, c in zip(sel.selected, sel.chain)])
tables["injection"] = injection_rates(sel)
# figures 6 and 8-12 during training: each iteration's Scout groups, Post-Scouts and selections
iters = [read_iteration(f) for f in i.selections]
iters = pd.concat(iters, ignore_index=True) if iters else pd.DataFrame(columns=["benchmark", "chain", "iteration"])
post = [read_iteration(f) for f in i.post]
post = pd.concat(post, ignore_index=True) if post else pd.DataFrame(columns=["benchmark", "chain", "iteration",
                                                                              "task_id", "success"])
tables["exploration"] = training_exploration(iters.assign(inject=[inject[c] for c in iters.chain]), post,
                                             p.threshold)
for name, t in tables.items():
    write_text(snakemake.output[name], t.to_csv(index=False))
    log.info("%s:\n%s", name, t.to_string())
