"""Figures that explain themselves: whole-number ticks for counts, a line drawn over an identical one still
shows and is named, rate and token axes start at 0, training axes start and end where the data do, figure 3
says on the image when every cost is $0 and its title promises no line it does not draw, and figure 11's
legend shows each point as it is plotted."""
from __future__ import annotations

import pandas as pd
import pytest

from skillrepro.studies.speedrunner import analysis
from skillrepro.studies.speedrunner.analysis import figures, tables

STUDY = analysis.Study(
    variants={"react": {"method": "react", "options": {}, "benchmarks": None},
              "speedrunner": {"method": "speedrunner", "options": {}, "benchmarks": None}},
    benchmarks={"babyai": {"env": "babyai", "options": {}, "after": None, "headline": "success"}},
    sleep_every=3, train_rollouts=6, config_name="test.yaml")


@pytest.fixture
def drawn(monkeypatch):
    """The matplotlib figures the analysis draws, kept open instead of saved."""
    drawn_figures = []
    monkeypatch.setattr(figures, "_save", lambda fig, out: drawn_figures.append(fig))
    yield drawn_figures
    import matplotlib.pyplot as plt

    plt.close("all")


def per_seed(cost: float) -> pd.DataFrame:
    # both variants score exactly alike (one line hides the other unless they look different); a rate of 0 and
    # token counts whose mean - s.d. goes below 0
    return pd.DataFrame([
        dict(run_benchmark="babyai", eval_benchmark="babyai", method=v, variant=v, seed=seed, library_version=k,
             train_rollouts=3 * k, n_episodes=2, score=0.0 if k == 0 else 0.5, success=0.0, progression=0.0,
             output_tokens=[1, 60][seed], llm_calls=3, skill_calls=1, cached_ratio=0.5, cost=cost, actor_cost=cost / 2,
             invalid_action_rate=0.0)
        for v in STUDY.variants for seed in (0, 1) for k in (0, 1, 2)])


def test_curves_use_whole_rollouts_rates_from_zero_and_tell_identical_lines_apart(drawn, tmp_path):
    figures.curves(tables.checkpoint_table(per_seed(0.0)), STUDY.groups("fig2"), STUDY, tmp_path / "f.png",
                    "Figure 2", "any run")
    (fig,) = drawn
    rate, tokens = fig.axes[:2]
    assert rate.get_ylim()[0] == 0 and tokens.get_ylim()[0] == 0
    for ax in (rate, tokens):
        lo, hi = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
        lines = ax.get_lines()
        assert len(lines) == 2 and (lines[0].get_xydata() == lines[1].get_xydata()).all()  # drawn on top of each other
        looks = {(ln.get_marker(), ln.get_linestyle(), ln.get_linewidth()) for ln in lines}
        assert len(looks) == 2
        assert all(ln.get_markerfacecolor() == "none" for ln in lines)  # hollow: the one below shows through
    assert [t.get_text() for t in rate.get_legend().get_texts()] == ["react", "speedrunner"]
    # ...and the panel says so: a reader does not have to find the line underneath
    for ax in (rate, tokens):
        assert "react and speedrunner: identical, drawn on top of each other" in [t.get_text() for t in ax.texts]
        assert figures.coinciding(ax) == [["react", "speedrunner"]]
        assert_x_from_data(ax)


def test_lines_that_differ_are_not_called_identical(drawn, tmp_path):
    rows = per_seed(0.0)
    rows.loc[rows.variant == "speedrunner", "score"] = 1.0
    figures.curves(tables.checkpoint_table(rows), STUDY.groups("fig2"), STUDY, tmp_path / "f.png", "Figure 2", "any run")
    rate = drawn[0].axes[0]
    assert figures.coinciding(rate) == [] and not rate.texts
    looks = [(ln.get_marker(), ln.get_linestyle()) for ln in rate.get_lines()]
    assert len(set(m for m, _ in looks)) == len(set(ls for _, ls in looks)) == 2  # a marker and a style each


def assert_x_from_data(ax) -> None:
    """The panel's x axis starts at its first point and ends at its last (or, for one x, centres it as the only
    tick): no axis that starts before the data, or after it."""
    import numpy as np

    xs = np.unique(np.concatenate([ln.get_xdata().astype(float) for ln in ax.get_lines()]))
    lo, hi = ax.get_xlim()
    if len(xs) > 1:
        assert (lo, hi) == (xs[0], xs[-1]), ((lo, hi), xs)
    else:
        ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert ticks == [xs[0]] and lo < xs[0] < hi, (ticks, (lo, hi), xs)


def training(cost: float) -> pd.DataFrame:
    return per_seed(cost)[["run_benchmark", "variant", "seed", "train_rollouts", "n_episodes", "cost", "actor_cost"]]


def texts(fig) -> str:
    return " ".join(t.get_text() for ax in fig.axes for t in ax.texts)


def test_figure3_says_on_the_image_that_an_unpriced_model_costs_nothing(drawn, tmp_path):
    figures.cost_curves(training(0.0), STUDY, tmp_path / "f3.png", model="qwen2.5-coder-0.5b")
    figures.cost_curves(training(0.02), STUDY, tmp_path / "f3.png", model="gpt-x")
    free, priced = drawn
    assert "qwen2.5-coder-0.5b has no price" in texts(free)
    assert "no price" not in texts(priced)
    for fig in drawn:
        ax = fig.axes[0]
        assert ax.get_ylim()[0] == 0
        assert all(float(t).is_integer() for t in ax.get_xticks())
        assert_x_from_data(ax)
        assert_title_promises_only_what_is_drawn(ax)


def assert_title_promises_only_what_is_drawn(ax) -> None:
    """A title that names a dotted line has one, and it shows: it is not drawn exactly under a solid line."""
    dotted = [ln for ln in ax.get_lines() if ln.get_linestyle() == ":"]
    solid = [ln for ln in ax.get_lines() if ln.get_linestyle() != ":"]
    for ln in dotted:
        under = [s for s in solid if s.get_xydata().shape == ln.get_xydata().shape
                 and (s.get_xydata() == ln.get_xydata()).all()]
        assert not under, f"a dotted line lies exactly under {under[0].get_label()}"
    assert ("dotted" in ax.get_title()) == bool(dotted), (ax.get_title(), dotted)


def test_figure3_axis_starts_at_the_first_batch_and_draws_the_sleep_share_only_where_there_is_one(drawn, tmp_path):
    """Training costs are per batch: the first point is at sleep_every rollouts (3), not 0. ReAct's sleep phase
    costs nothing, so its batch-only line would lie under its full one: not drawn, and an unpriced model draws
    none at all; the title mentions the dotted lines only when there are some."""
    batches = training(0.02)
    batches = batches[batches.train_rollouts > 0].copy()
    react = batches.variant == "react"
    batches.loc[react, "actor_cost"] = batches.loc[react, "cost"]
    figures.cost_curves(batches, STUDY, tmp_path / "f3.png", model="gpt-x")
    free = batches.assign(cost=0.0, actor_cost=0.0)
    figures.cost_curves(free, STUDY, tmp_path / "f3.png", model="qwen2.5-coder-0.5b")
    one = batches[batches.train_rollouts == 3]  # a single batch: one point per line
    figures.cost_curves(one, STUDY, tmp_path / "f3.png", model="gpt-x")
    priced, unpriced, single = (fig.axes[0] for fig in drawn)
    assert priced.get_xlim() == (3, 6)
    dotted = [ln for ln in priced.get_lines() if ln.get_linestyle() == ":"]
    speedrunner = next(ln for ln in priced.get_lines() if ln.get_label() == "speedrunner")
    assert [ln.get_color() for ln in dotted] == [speedrunner.get_color()]
    assert "thin dotted" in priced.get_title() and "dotted" not in unpriced.get_title()
    assert not [ln for ln in unpriced.get_lines() if ln.get_linestyle() == ":"]
    for ax in (priced, unpriced, single):
        assert_x_from_data(ax)
        assert_title_promises_only_what_is_drawn(ax)
    assert list(single.get_xticks()) == [3]


def main_table(variant: str, tokens: float, score: float, sd: float) -> dict:
    return dict(benchmark="babyai", method=variant, variant=variant, output_tokens_per_episode_mean=tokens,
                output_tokens_per_episode_sd=sd, score_mean=score, score_sd=sd)


def test_figure11_legend_shows_each_point_as_it_is_drawn(drawn, tmp_path):
    """Each legend entry is the plotted point's own marker, size and colours; error bars are drawn only where
    seeds differ (a bar of length 0 shows nothing on the plot but a cross in the legend)."""
    from matplotlib.lines import Line2D

    one_seed = pd.DataFrame([main_table("react", 60, 0.0, float("nan")), main_table("speedrunner", 30, 0.5, float("nan"))])
    seeds = pd.DataFrame([main_table("react", 60, 0.0, 5.0), main_table("speedrunner", 30, 0.5, 0.1)])
    figures.plane_figure({"model-a": one_seed, "model-b": seeds}, STUDY, tmp_path / "f11.png")
    (fig,) = drawn
    ax = fig.axes[0]
    points = {c.get_label(): c for c in ax.containers}
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.texts] == list(points) and len(points) == 4
    for handle, text in zip(legend.legend_handles, legend.texts):
        point, _, bars = points[text.get_text()]
        assert isinstance(handle, Line2D) and handle.get_linestyle() == "None", text.get_text()
        for prop in ("marker", "markersize", "markerfacecolor", "markeredgecolor", "markeredgewidth"):
            assert getattr(handle, f"get_{prop}")() == getattr(point, f"get_{prop}")(), (text.get_text(), prop)
        # every bar drawn has a length; model-a's single seed has none
        for bar in bars:
            assert all((seg[0] != seg[1]).any() for seg in bar.get_segments()), text.get_text()
        assert bool(bars) == text.get_text().endswith("(model-b)")
    markers = {text.get_text(): h.get_marker() for h, text in zip(legend.legend_handles, legend.texts)}
    assert markers["react (model-a)"] == markers["speedrunner (model-a)"] != markers["react (model-b)"]
