"""SkillScaffold figures: (a) success rate per decision rule, (b) measured gain per utility quintile; and the
exploration view (Scout vs Post-Scout success and injection rate per Scout-group kind)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from skillrepro.pipeline import setup_logging  # noqa: E402

log = setup_logging(snakemake)
rules = pd.read_csv(snakemake.input.rules)
quint = pd.read_csv(snakemake.input.quintiles)
expl = pd.read_csv(snakemake.input.exploration)

fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
for k, ((bench, var), g) in enumerate(rules.groupby(["benchmark", "variant"])):
    a.bar([x + 0.8 * k / max(1, rules.groupby(["benchmark", "variant"]).ngroups) for x in range(len(g))],
          100 * g.success_rate, width=0.8 / max(1, rules.groupby(["benchmark", "variant"]).ngroups),
          label=f"{bench}/{var}")
a.set_xticks(range(4), ["skill-free", "random", "forced top-1", "gated top-1"], rotation=15)
a.set_ylabel("success rate (%)")
a.set_title("(a) decision rules")
for (bench, var), g in quint.groupby(["benchmark", "variant"]):
    b.plot(g.quintile, 100 * g.mean_gain, marker="o", label=f"{bench}/{var}")
b.axhline(0, color="grey", lw=0.8)
b.set_xlabel("utility quintile (low to high)")
b.set_ylabel("gain over skill-free (pp)")
b.set_title("(b) measured gain by utility")
for ax in (a, b):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(snakemake.output.validation, dpi=150)

order = ["all_failure", "mixed", "all_success"]
fig, (top, bottom) = plt.subplots(2, 1, figsize=(6, 5), sharex=True)
for (bench, var), g in expl.groupby(["benchmark", "variant"]):
    g = g.set_index("group").reindex(order)
    top.plot(order, 100 * g.scout_success, marker="o", ls="--", label=f"{bench}/{var} Scouts")
    top.plot(order, 100 * g.post_scout_success, marker="s", label=f"{bench}/{var} Post-Scouts")
    bottom.bar(order, 100 * g.injection_rate, alpha=0.6, label=f"{bench}/{var}")
top.set_ylabel("success (%)")
bottom.set_ylabel("skill injected (%)")
bottom.set_xticks(range(3), ["all-wrong", "mixed", "all-correct"])
for ax in (top, bottom):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
fig.tight_layout()
fig.savefig(snakemake.output.exploration, dpi=150)
log.info("figures written")
