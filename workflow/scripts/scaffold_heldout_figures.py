"""SkillScaffold figure 1 (empirical summary: held-out skill-free success of the base model, plain GRPO and each
SkillScaffold chain, with the share of training queries that got a skill) and figure 7 (training success-rate
curves: each iteration's skill-free Scouts, raw and smoothed, beside held-out success per checkpoint); figure 6 (and
9-12 on the other benchmarks) during training: Scout vs Post-Scout success and the injection and positive-utility
rates per Scout-group kind and iteration; figure 8: the training-time injection rate per iteration."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from skillrepro.pipeline import setup_logging  # noqa: E402

log = setup_logging(snakemake)
i, o = snakemake.input, snakemake.output
# the base model's chain is "" (kept as a string so that it groups like any chain)
held = pd.read_csv(i.heldout, keep_default_na=False)
curve = pd.read_csv(i.curve, keep_default_na=False)
inj = pd.read_csv(i.injection, keep_default_na=False)
pooled = held[(held.split == "all") & (held.category == "all")]
benches = sorted(pooled.benchmark.unique())

# Figure 1: the last checkpoint of each chain, beside the base model.
fig, axes = plt.subplots(1, len(benches), figsize=(4.5 * len(benches), 3.6), squeeze=False)
for ax, b in zip(axes[0], benches):
    g = pooled[pooled.benchmark == b]
    last = g[g.checkpoint == g.groupby("chain").checkpoint.transform("max")].sort_values(["chain"])
    names = [m if not c else f"{m}\nckpt {k}" for m, c, k in zip(last.method, last.chain, last.checkpoint)]
    ax.bar(range(len(last)), last.success_pct, color=["#999999" if not c else "#4c72b0" if c == "grpo" else "#2a9d8f"
                                                      for c in last.chain])
    for x, (c, v) in enumerate(zip(last.chain, last.success_pct)):
        r = inj[(inj.benchmark == b) & (inj.chain == c)]
        note = f"{v:.1f}" + (f"\ninj. {r.injection_pct.iloc[0]:.0f}%" if len(r) else "")
        ax.text(x, v, note, ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(last)), names, fontsize=6, rotation=20)
    ax.set_ylim(0, 110)
    ax.set_ylabel("held-out success (%), skill-free")
    ax.set_title(f"{b} (n = {int(last.n_episodes.max())} episodes)", fontsize=9)
fig.tight_layout()
fig.savefig(o.figure1, dpi=130)

# Figure 7: training success rate per iteration (faint: raw, dark: smoothed) and held-out per checkpoint (dashed).
fig, axes = plt.subplots(1, len(benches), figsize=(4.5 * len(benches), 3.4), squeeze=False)
for ax, b in zip(axes[0], benches):
    for n, (chain, g) in enumerate(curve[curve.benchmark == b].groupby("chain")):
        color = f"C{n}"
        ax.plot(g.iteration, g.success_pct, color=color, alpha=0.3)
        ax.plot(g.iteration, g.smoothed_pct, color=color, label=f"{chain} (Scouts)")
        h = pooled[(pooled.benchmark == b) & ((pooled.chain == chain) | (pooled.chain == ""))]  # base: checkpoint 0
        h = h.sort_values("checkpoint")
        ax.plot(h.checkpoint, h.success_pct, color=color, ls="--", marker=".", label=f"{chain} (held-out)")
    ax.set_ylim(-2, 105)  # a fixed scale: a run where nothing succeeds still reads as 0 %
    ax.set_xlabel("iteration / checkpoint")
    ax.set_ylabel("success (%)")
    ax.set_title(b, fontsize=9)
    ax.legend(fontsize=6)
fig.tight_layout()
fig.savefig(o.figure7, dpi=130)

# Figures 6 and 9-12: one column per benchmark x SkillScaffold chain; top: Scout (dashed) and Post-Scout (solid)
# success per Scout-group kind, bottom: injection (solid) and positive-utility (dotted) rates.
ex = pd.read_csv(i.exploration, keep_default_na=False)
cols = sorted({(b, c) for b, c in zip(ex.benchmark, ex.chain)})
fig, axes = plt.subplots(2, max(1, len(cols)), figsize=(4.2 * max(1, len(cols)), 5.6), squeeze=False)
colors = {"all_failure": "#c44e52", "mixed": "#dd8452", "all_success": "#55a868"}
for n, (b, chain) in enumerate(cols):
    g = ex[(ex.benchmark == b) & (ex.chain == chain)]
    for group, color in colors.items():
        h = g[g.group == group].sort_values("iteration")
        axes[0][n].plot(h.iteration, 100 * h.scout_success, color=color, ls="--", marker=".")
        axes[0][n].plot(h.iteration, 100 * h.post_scout_success, color=color, marker="o", label=group)
        axes[1][n].plot(h.iteration, 100 * h.injection_rate, color=color, marker="o", label=f"{group} injected")
        axes[1][n].plot(h.iteration, 100 * h.positive_rate, color=color, ls=":", label=f"{group} U > threshold")
    axes[0][n].set_title(f"{b}, {chain}: Scouts (dashed) vs Post-Scouts", fontsize=8)
    axes[1][n].set_title("skill injection / positive-utility rate", fontsize=8)
    for ax in axes[:, n]:
        ax.set_ylim(-2, 105)
        ax.set_xlabel("training iteration")
        ax.set_ylabel("%")
        ax.legend(fontsize=5)
if not cols:
    axes[0][0].text(0.5, 0.5, "no training iteration with a Generator", ha="center", transform=axes[0][0].transAxes)
fig.tight_layout()
fig.savefig(o.figure6, dpi=130)

# Figure 8: the share of each iteration's training queries whose Post-Scouts got a skill, per chain.
fig, axes = plt.subplots(1, max(1, len(benches)), figsize=(4.5 * max(1, len(benches)), 3.2), squeeze=False)
for ax, b in zip(axes[0], benches):
    for chain, g in ex[(ex.benchmark == b) & (ex.group == "all")].groupby("chain"):
        g = g.sort_values("iteration")
        ax.plot(g.iteration, 100 * g.injection_rate, marker="o",
                label=f"{chain} (mean {100 * g.injection_rate.mean():.1f} %)")
    ax.set_ylim(-2, 105)
    ax.set_xlabel("training iteration")
    ax.set_ylabel("queries injected (%)")
    ax.set_title(b, fontsize=9)
    ax.legend(fontsize=6)
fig.tight_layout()
fig.savefig(o.figure8, dpi=130)
log.info("figures for %s", benches)
