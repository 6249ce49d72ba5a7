"""Figures that explain themselves: whole-number ticks for counts, a line drawn over an identical one still
shows, rate and token axes start at 0, and figure 3 says on the image when every cost is $0."""
from __future__ import annotations

import pandas as pd
import pytest

from skillrepro import analysis
from skillrepro.analysis import figures, tables

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
