"""The figures: learning curves of the comparisons COMPARISONS declares, training cost, the zombie
ablation, the phase change and the cost-success plane; an empty figure says what its config lacks."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from skillrepro.studies.speedrunner.analysis import COMPARISONS, Study, cross_model_groups, over_seeds, own
from skillrepro.store import atomic_path

matplotlib.use("Agg")  # before pyplot is imported: no display on a cluster node
import matplotlib.pyplot as plt  # noqa: E402

# ------------------------------------------------------------------------------------------ figures
def _save(fig, out: str | Path) -> None:
    fig.tight_layout()
    with atomic_path(out) as tmp:  # a half-drawn figure never stands as the output; the umask's mode
        fig.savefig(tmp, dpi=120, format=Path(out).suffix.lstrip(".") or "png")
    plt.close(fig)


def empty_figure(out: str | Path, title: str, needs: str, config_name: str) -> None:
    """The figure's empty state: which runs it needs and which config produces them."""
    fig, ax = plt.subplots(figsize=(7, 2.6))
    ax.axis("off")
    ax.text(0.5, 0.5, f"{title}\n\nNo runs for this figure in {config_name}.\nIt needs {needs}.",
            ha="center", va="center", wrap=True, fontsize=10)
    _save(fig, out)


# One look per line of a panel: hollow markers of different shapes, line styles and widths (the first line
# widest), so a line drawn exactly over another still shows, and the legend tells them apart in grey print.
_MARKERS = "os^Dv<>P"
_LINES = ("-", "--", "-.", ":")


def _band(ax, d: pd.DataFrame, x: str, metric: str, label: str, i: int = 0, **kw):
    """One variant's line (mean over seeds) with its ± 1 s.d. band; returns the line."""
    d = d.sort_values(x)
    mean, sd = d[f"{metric}_mean"].astype(float), d[f"{metric}_sd"].astype(float).fillna(0)
    kw.setdefault("ls", _LINES[i % len(_LINES)])
    # clip_on=False: a value on the axis's edge (a rate of 0 or 1) is drawn over the frame, not hidden by it
    ax.plot(d[x], mean, marker=_MARKERS[i % len(_MARKERS)], markerfacecolor="none", markersize=7 + 2 * (i % 3),
            lw=max(2.4 - 0.5 * i, 1.0), label=label, clip_on=False, zorder=3 + i, **kw)
    line = ax.lines[-1]
    ax.fill_between(d[x], mean - sd, mean + sd, alpha=0.15, color=line.get_color())
    return line


def _x_from_data(ax) -> None:
    """The x axis spans the plotted points exactly: it starts at the first and ends at the last (a marker on the
    edge is drawn over the frame). Where every point has the same x, that x is the only tick, centred."""
    xs = np.unique(np.concatenate([ln.get_xdata().astype(float) for ln in ax.get_lines()] or [np.zeros(0)]))
    xs = xs[np.isfinite(xs)]
    if len(xs) > 1:
        ax.set_xlim(xs[0], xs[-1])
    elif len(xs) == 1:
        ax.set_xlim(xs[0] - 1, xs[0] + 1)
        ax.set_xticks([xs[0]])


def coinciding(ax) -> list[list[str]]:
    """The labels of the panel's lines that lie exactly on top of each other (same points), in groups."""
    groups: list[list] = []
    for ln in ax.get_lines():
        if ln.get_label().startswith("_"):  # unlabelled: a line's companion (figure 3's dotted share)
            continue
        xy = ln.get_xydata()
        same = next((g for g in groups if g[0].get_xydata().shape == xy.shape
                     and np.allclose(g[0].get_xydata(), xy, equal_nan=True)), None)
        if same is None:
            groups.append([ln])
        else:
            same.append(ln)
    return [[ln.get_label() for ln in g] for g in groups if len(g) > 1]


def _say_coinciding(ax) -> None:
    """Lines drawn exactly over each other are named under the panel's title: their markers and line styles
    differ, but a reader should not have to find the one underneath."""
    groups = coinciding(ax)
    if groups:
        same = "; ".join(" and ".join(g) for g in groups)
        ax.set_title(ax.get_title(), pad=16)  # room for the note between the title and the panel
        ax.text(0.5, 1.015, f"{same}: identical, drawn on top of each other", transform=ax.transAxes,
                ha="center", va="bottom", fontsize=8, color="0.3")


def _counts_axis(ax, axis: str = "x") -> None:
    """Whole-number ticks on an axis that counts something (training rollouts)."""
    (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))


def _rate_axis(ax) -> None:
    """A success rate or progression: 0 to 1, nothing below 0."""
    ax.set_ylim(0, 1.05)


def _from_zero(ax) -> None:
    """Tokens and dollars: never below 0 (a band's lower edge is mean - s.d.)."""
    ax.set_ylim(bottom=0)


def curves(checkpoints: pd.DataFrame, groups: dict[str, list[str]], study: Study, out: str | Path,
           title: str, needs: str) -> None:
    """Figures 2, 4, 7, 12: per benchmark (a row), headline metric and output tokens per episode against
    training rollouts, one line per variant, mean ± 1 s.d. over seeds. `groups`: benchmark -> variants."""
    data = own(checkpoints)
    groups = {b: vs for b, vs in groups.items() if not data[(data.run_benchmark == b) & data.variant.isin(vs)].empty}
    if not groups:
        return empty_figure(out, title, needs, study.config_name)
    fig, axes = plt.subplots(len(groups), 2, figsize=(10, 3.4 * len(groups)), squeeze=False)
    for row, (bench, variants) in zip(axes, groups.items()):
        for i, variant in enumerate(variants):
            d = data[(data.run_benchmark == bench) & (data.variant == variant)]
            if not d.empty:
                for ax, metric in zip(row, ["score", "output_tokens"]):
                    _band(ax, d, "train_rollouts", metric, variant, i)
        head = study.headline(bench)
        row[0].set(title=f"{bench}: test {head}", xlabel="training rollouts", ylabel=head)
        row[1].set(title=f"{bench}: output tokens per episode", xlabel="training rollouts", ylabel="tokens")
        _rate_axis(row[0])
        _from_zero(row[1])
        for ax in row:
            _counts_axis(ax)
            _x_from_data(ax)
            _say_coinciding(ax)
        row[0].legend(fontsize=8)
    fig.suptitle(title)
    _save(fig, out)


def comparison_figure(checkpoints: pd.DataFrame, figure: str, study: Study, out: str | Path) -> None:
    """Learning-curve figure `figure` as COMPARISONS declares it (its variants, title and empty-state note)."""
    c = COMPARISONS[figure]
    curves(checkpoints, study.groups(figure), study, out, title=c.title, needs=c.needs)


def cross_model_figure(checkpoints: pd.DataFrame, model: str, number: int, study: Study, out: str | Path,
                       source: str) -> None:
    """Figure 9 or 10: figure 2's learning curves for another model's run (`checkpoints`, its checkpoints.csv
    at `source`). A run without test checkpoints of a main comparison fails: these figures have no empty state."""
    groups = cross_model_groups(checkpoints, study)
    if not groups:
        raise ValueError(f"figure {number}: {source} holds no test checkpoint of a main-comparison variant of "
                         f"{model}: finish that run first")
    curves(checkpoints, groups, study, out, needs="",
           title=f"Figure {number}: main comparison with {model} (success or progression, and output tokens, "
                 f"over training)")


def cost_curves(training: pd.DataFrame, study: Study, out: str | Path, model: str | None = None) -> None:
    """Figure 3: dollars per training episode (the batch's calls + the sleep phase after it) over training,
    mean ± 1 s.d. over seeds; thin dotted, the batch's own share, drawn only for a variant whose sleep phase
    cost something (elsewhere it would lie under the full line), and the panel's title mentions it only when
    one is drawn. Every cost $0 (a model without a price, `model`) is said on the image."""
    title = "Figure 3: dollar cost per episode over training"
    main = {b: study.main_on(b) for b in study.benchmarks}
    training = training[[v in main.get(b, ()) for b, v in zip(training.run_benchmark, training.variant)]]
    if training.empty:
        return empty_figure(out, title, "training batches of the main methods", study.config_name)
    per = over_seeds(training, ["run_benchmark", "variant", "train_rollouts"], ["cost", "actor_cost"])
    benches = sorted(per.run_benchmark.unique())
    fig, axes = plt.subplots(1, len(benches), figsize=(5 * len(benches), 3.6), squeeze=False)
    unpriced = bool((per.cost_mean.fillna(0) == 0).all())
    for ax, bench in zip(axes[0], benches):
        for i, variant in enumerate(main[bench]):
            d = per[(per.run_benchmark == bench) & (per.variant == variant)]
            if not d.empty:
                line = _band(ax, d, "train_rollouts", "cost", variant, i)
                d = d.sort_values("train_rollouts")
                if not np.allclose(d.actor_cost_mean.fillna(0), d.cost_mean.fillna(0)):
                    ax.plot(d.train_rollouts, d.actor_cost_mean, ls=":", lw=1, color=line.get_color(), clip_on=False,
                            zorder=2, label=f"_{variant} without the sleep phase")
        dotted = any(ln.get_linestyle() == ":" for ln in ax.get_lines())
        ax.set(title=f"{bench}: $ per episode" + (" (thin dotted: without sleep)" if dotted else ""),
               xlabel="training rollouts", ylabel="dollars")
        _counts_axis(ax)
        _x_from_data(ax)
        _say_coinciding(ax)
        if unpriced:
            ax.set_ylim(0, 1)
            ax.text(0.5, 0.55, f"All costs are $0: {f'model {model}' if model else 'the model'} has no price\n"
                    "in the config's `pricing` (an embedded or self-hosted model)", transform=ax.transAxes,
                    ha="center", va="center", fontsize=9, bbox=dict(boxstyle="round", fc="lightyellow", ec="grey"))
        else:
            _from_zero(ax)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    _save(fig, out)


def zombie_figure(zombies: pd.DataFrame, study: Study, out: str | Path) -> None:
    """Figure 5: bars = final progression minus ReAct's at each zombie level (points); dotted lines (right
    axis) = %Combat of the final libraries."""
    title = "Figure 5: robustness to zombie frequency, relative to ReAct"
    d = zombies[zombies.method != "react"]
    if d.empty or zombies.zombie_frequency.nunique() < 1 or study.reference("react") is None:
        return empty_figure(out, title, "Crafter instances at several zombie_frequency levels with ReAct and "
                            "other methods (configs/paper.yaml: crafter, crafter_zombie0x, crafter_zombie2x)",
                            study.config_name)
    levels = sorted(d.zombie_frequency.unique())
    variants = sorted(d.variant.unique())
    fig, ax = plt.subplots(figsize=(7, 4))
    twin = ax.twinx()
    width = 0.8 / len(variants)
    for i, variant in enumerate(variants):
        v = d[d.variant == variant].set_index("zombie_frequency").reindex(levels)
        xs = np.arange(len(levels)) + (i - (len(variants) - 1) / 2) * width
        bars = ax.bar(xs, v.vs_react_points_mean, width, yerr=v.vs_react_points_sd.fillna(0), label=variant, capsize=3)
        twin.plot(np.arange(len(levels)), 100 * v.combat_share_mean, ls=":", lw=2, marker="s", markeredgecolor="black",
                  color=bars.patches[0].get_facecolor())
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(levels)), [f"{f:g}x" for f in levels])
    ax.set(xlabel="zombie frequency", ylabel="progression vs ReAct (points)", title=title)
    twin.set(ylabel="%Combat of the final library (dotted)", ylim=(0, 100))
    twin.set_zorder(ax.get_zorder() + 1)  # the overlay above the bars
    twin.patch.set_visible(False)
    ax.legend(fontsize=8)
    _save(fig, out)


def shift_figure(checkpoints: pd.DataFrame, retained: pd.DataFrame, study: Study, out: str | Path) -> None:
    """Figure 6: both test sets' headline metric and output tokens over the whole chain of training
    (phase one, then phase two from phase one's last library), one line per variant and test set."""
    title = "Figure 6: distribution shift and retention"
    phases = study.phases()
    if not phases or checkpoints.empty:
        return empty_figure(out, title, "a benchmark with `after:` (configs/shift.yaml)", study.config_name)
    fig, axes = plt.subplots(len(phases), 2, figsize=(11, 3.8 * len(phases)), squeeze=False)
    for row, (a, b) in zip(axes, phases):
        chain = checkpoints[checkpoints.run_benchmark.isin([a, b])]
        for i, ((variant, test_set), d) in enumerate(chain.groupby(["variant", "eval_benchmark"], sort=True)):
            for ax, metric in zip(row, ["score", "output_tokens"]):
                _band(ax, d, "train_rollouts", metric, f"{variant} on {test_set}", i,
                      ls="-" if test_set == a else "--")
        for ax in row:
            ax.axvline(study.offset(b), color="grey", lw=0.8)
            _counts_axis(ax)
        _rate_axis(row[0])
        _from_zero(row[1])
        kept = retained[(retained.trained_first == a) & (retained.trained_second == b)]
        summary = "\n".join(f"{r.variant}: {r.change_points:+.1f} points, tokens {r.output_tokens_change_pct:+.1f}%"
                            for r in kept.itertuples())
        if summary:
            row[0].text(0.01, 0.98, f"{a} after {b}:\n{summary}", transform=row[0].transAxes, va="top", fontsize=7)
        row[0].set(title=f"{a} then {b}: test {study.headline(a)}", xlabel="training rollouts")
        row[1].set(title="output tokens per episode", xlabel="training rollouts")
        row[0].legend(fontsize=7)
    fig.suptitle(title)
    _save(fig, out)


def plane_figure(mains: dict[str, pd.DataFrame], study: Study, out: str | Path) -> None:
    """Figure 11: the performance-efficiency plane at the final checkpoint: output tokens per episode (x)
    against the headline metric (y), one panel per benchmark, one marker per model, one colour per method."""
    title = "Figure 11: performance-efficiency plane (final checkpoint)"
    frames = [m.assign(model=label) for label, m in mains.items() if not m.empty]
    if not frames:
        return empty_figure(out, title, "finished main tables", study.config_name)
    data = pd.concat(frames)
    data = data[[b not in study.benchmarks or v in study.main_on(b) for b, v in zip(data.benchmark, data.variant)]]
    benches = sorted(data.benchmark.unique())
    fig, axes = plt.subplots(1, len(benches), figsize=(5 * len(benches), 4), squeeze=False)

    markers = dict(zip(mains, "osD^v<>p*"))
    for ax, bench in zip(axes[0], benches):
        d = data[data.benchmark == bench]
        colours: dict[str, Any] = {}
        handles = []
        for n, r in enumerate(d.itertuples()):
            c = colours.setdefault(r.variant, f"C{len(colours)}")
            # hollow markers, each later one smaller: points at the same place all show
            look = dict(marker=markers[r.model], color=c, markerfacecolor="none", markersize=max(11 - 2 * n, 4),
                        markeredgewidth=1.5)
            # error bars only where seeds differ (a zero-length bar draws nothing, but its legend entry a cross)
            ax.errorbar(r.output_tokens_per_episode_mean, r.score_mean, xerr=_nz(r.output_tokens_per_episode_sd) or None,
                        yerr=_nz(r.score_sd) or None, ls="none", clip_on=False, label=f"{r.variant} ({r.model})", **look)
            # the legend shows each point as it is drawn: its marker, size and colour, nothing else
            handles.append(Line2D([], [], ls="none", label=f"{r.variant} ({r.model})", **look))
        ax.set(title=bench, xlabel="output tokens per episode", ylabel=study.headline(bench) if bench in study.benchmarks else "score")
        _rate_axis(ax)
        ax.set_xlim(left=0)
        ax.legend(handles=handles, fontsize=7)
    fig.suptitle(title)
    _save(fig, out)


def _nz(x: float) -> float:
    return 0.0 if pd.isna(x) else float(x)
