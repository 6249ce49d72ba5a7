"""SkillScaffold's figures, drawn from the tables its rules write: the validation experiment (section 5.4, figure 5)
and its exploration view, and the training study's figures 1, 6-8 (and 9-12: figure 6 on the other benchmarks)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

from skillrepro.store import atomic_path

matplotlib.use("Agg")  # before pyplot is imported: no display on a cluster node
import matplotlib.pyplot as plt  # noqa: E402


def _save(fig: Any, out: str | Path, dpi: int = 130) -> None:
    fig.tight_layout()
    with atomic_path(out) as tmp:  # a half-drawn figure never stands as the output
        fig.savefig(tmp, dpi=dpi, format="png")
    plt.close(fig)


def validation_figure(rules: Any, quint: Any, out: str | Path) -> None:
    """Figure 5: (a) success rate per decision rule, (b) measured gain per utility quintile."""
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
    _save(fig, out, dpi=150)


def competence_figure(comp: Any, out: str | Path) -> None:
    """Figure 3(b): per skill-free competence level (successful probes), the mean candidate effect with its 95 %
    interval (none where the level has too few queries) and the mean best effect, over the grey band where the best
    effect lies when no card changes success (`best_effect_null_*`: the permutation null of `best_effect_null`)."""
    groups = list(comp.groupby(["benchmark", "variant"])) if len(comp) else []
    fig, axes = plt.subplots(1, max(1, len(groups)), figsize=(4.6 * max(1, len(groups)), 3.6), squeeze=False)
    for ax, ((bench, var), g) in zip(axes[0], groups):
        g = g.sort_values("probe_successes")
        x = g.probe_successes
        ax.fill_between(x, 100 * g.best_effect_null_low, 100 * g.best_effect_null_high, color="#bbbbbb", alpha=0.6,
                        step="mid", label="best effect by chance (95 % null band)")
        ax.plot(x, 100 * g.best_effect_null_mean, color="#777777", ls=":", drawstyle="steps-mid")
        ax.plot(x, 100 * g.best_effect, color="#2a9d8f", marker="^", label="best effect")
        ok = g.mean_effect_ci_low.notna()
        ax.errorbar(x[ok], 100 * g.mean_effect[ok], yerr=[100 * (g.mean_effect - g.mean_effect_ci_low)[ok],
                                                           100 * (g.mean_effect_ci_high - g.mean_effect)[ok]],
                    color="#4c72b0", marker="o", capsize=3, ls="none", label="mean effect, 95 % interval")
        ax.plot(x[~ok], 100 * g.mean_effect[~ok], color="#4c72b0", marker="o", mfc="white", ls="none",
                label="mean effect, too few queries for an interval")
        seen = g["one_card_effect_80"] if "one_card_effect_80" in g else [float("nan")] * len(g)
        for xi, n, e in zip(x, g.n_queries, seen):  # queries, and the one-card effect the band sees at that n
            ax.text(xi, 0.02, f"n={n}\n1 card: " + ("none" if e != e else f"+{100 * e:.0f}pp"),
                    transform=ax.get_xaxis_transform(), ha="center", fontsize=5)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xticks(range(int(g.n_probes.max()) + 1))
        ax.set_xlabel(f"skill-free competence (successful probes of {int(g.n_probes.max())})")
        ax.set_ylabel("effect on success (pp)")
        ax.set_title(f"{bench}/{var}", fontsize=9)
        ax.legend(fontsize=6)
    if not groups:
        axes[0][0].text(0.5, 0.5, "no competence probes (scaffold.n_probes: 0)", ha="center",
                        transform=axes[0][0].transAxes)
    _save(fig, out)


def exploration_figure(expl: Any, out: str | Path) -> None:
    """The validation batch's exploration view: Scout vs Post-Scout success and injection rate per Scout-group kind."""
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
    _save(fig, out, dpi=150)


def figure1(pooled: Any, inj: Any, benches: list[str], out: str | Path) -> None:
    """Figure 1: each chain's last checkpoint's held-out skill-free success beside the base model's, with its exact
    95 % interval over the held-out tasks and the share of training queries that got a skill. `pooled`: the held-out
    table's split-all, category-all rows."""
    fig, axes = plt.subplots(1, len(benches), figsize=(4.5 * len(benches), 3.6), squeeze=False)
    for ax, b in zip(axes[0], benches):
        g = pooled[pooled.benchmark == b]
        last = g[g.checkpoint == g.groupby("chain").checkpoint.transform("max")].sort_values(["chain"])
        names = [m if not k else f"{m}\nckpt {k}" for m, k in zip(last.method, last.checkpoint)]  # untrained: no ckpt
        ax.bar(range(len(last)), last.success_pct, color=["#999999" if not c else "#4c72b0" if c == "grpo" else "#2a9d8f"
                                                          for c in last.chain])
        if "ci_low_pct" in last:
            ax.errorbar(range(len(last)), last.success_pct, yerr=[last.success_pct - last.ci_low_pct,
                                                                  last.ci_high_pct - last.success_pct],
                        fmt="none", ecolor="black", elinewidth=0.8, capsize=3)
        for x, (c, v) in enumerate(zip(last.chain, last.success_pct)):
            r = inj[(inj.benchmark == b) & (inj.chain == c)]
            note = f"{v:.1f}" + (f"\ninj. {r.injection_pct.iloc[0]:.0f}%" if len(r) else "")
            ax.text(x + 0.06, v, note, ha="left", va="bottom", fontsize=7)  # beside the interval bar
        ax.set_xticks(range(len(last)), names, fontsize=6, rotation=20)
        ax.set_ylim(0, 110)
        ax.set_ylabel("held-out success (%), skill-free")
        ax.set_title(f"{b} (n = {int(last.n_tasks.max())} tasks, {int(last.n_episodes.max())} episodes; "
                     "bars: exact 95 %)", fontsize=8)
    _save(fig, out)


def figure7(pooled: Any, curve: Any, benches: list[str], out: str | Path) -> None:
    """Figure 7: training success per iteration (faint: raw, dark: smoothed) and held-out per checkpoint (dashed)."""
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
    _save(fig, out)


def figure6(ex: Any, out: str | Path) -> None:
    """Figures 6 and 9-12 during training: one column per benchmark x SkillScaffold chain; top: Scout (dashed) and
    Post-Scout (solid) success per Scout-group kind, bottom: injection (solid) and positive-utility (dotted) rates."""
    cols = sorted({(b, c) for b, c in zip(ex.benchmark, ex.chain)})
    fig, axes = plt.subplots(2, max(1, len(cols)), figsize=(4.2 * max(1, len(cols)), 5.6), squeeze=False)
    colors = {"all_failure": "#c44e52", "mixed": "#dd8452", "all_success": "#55a868"}
    for n, (b, chain) in enumerate(cols):
        g = ex[(ex.benchmark == b) & (ex.chain == chain)]
        for group, color in colors.items():
            h = g[g.group == group].sort_values("iteration")
            if h.empty:  # no query of this kind on this chain: no line, no legend entry
                continue
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
    _save(fig, out)


def figure8(ex: Any, benches: list[str], out: str | Path) -> None:
    """Figure 8: the share of each iteration's training queries whose Post-Scouts got a skill, per chain."""
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
    _save(fig, out)
