"""SkillScaffold table 4: later-minus-early skill-free success on each chain's fixed early cohort, per later
checkpoint, with a 95 % query-level bootstrap interval. Early: the cohort's own skill-free Scouts at iteration 0."""
import re

import pandas as pd

from skillrepro.pipeline import setup_logging
from skillrepro.store import write_text
from skillrepro.studies import scaffold_grpo as sg

log = setup_logging(snakemake)
i = snakemake.input


def chain_of(path: str) -> tuple[str, str]:
    """(benchmark, variant) of a path under results/scaffold/{bench}@{variant}0/ or {bench}/{variant}/cohort/."""
    m = re.search(r"results/scaffold/([^/@]+)@([a-z]+)0/", path) or re.search(r"results/scaffold/([^/]+)/([a-z]+)/cohort/", path)
    return m.group(1), m.group(2)


def by_chain(files):
    out: dict[tuple[str, str], list[str]] = {}
    for f in files:
        out.setdefault(chain_of(f), []).append(f)
    return out


read = lambda files: pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)  # noqa: E731
selections, early, post, later = by_chain(i.selections), by_chain(i.early), by_chain(i.post), by_chain(i.later)
rows = []
for chain in sorted(selections):
    cohort = sg.benefit_cohort(read(selections[chain]), read(post[chain]))
    scouts = read(early[chain])
    for f in sorted(later[chain], key=lambda f: int(re.search(r"ckpt(\d+)", f).group(1))):
        r = sg.internalization(scouts, read([f]), cohort)
        rows.append({"benchmark": chain[0], "variant": chain[1], "checkpoint": int(re.search(r"ckpt(\d+)", f).group(1)),
                     "n": r.n_queries, "recovery_pp": r.recovery_pp, "ci_low": r.ci_low, "ci_high": r.ci_high})
        log.info("%s: %s", chain, rows[-1])
table = pd.DataFrame(rows, columns=["benchmark", "variant", "checkpoint", "n", "recovery_pp", "ci_low", "ci_high"])
write_text(snakemake.output[0], table.to_csv(index=False))
