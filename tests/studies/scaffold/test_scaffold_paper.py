"""The paper's numbers the held-out tables append (studies/scaffold/paper.py): transcribed consistently (each
ALFWorld row's average is its task types' average weighted by the 134 valid_unseen games; each tau2-bench average
is its domains' mean), marked as not run here, and appended after the rows run here."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from skillrepro.studies.scaffold import paper


@pytest.mark.parametrize("method", list(paper.TABLE1))
def test_alfworld_rows_average_their_task_types(method):
    alf = paper.TABLE1[method][2]
    weights = np.array([n for _, n in paper.ALFWORLD_TYPES])
    assert sum(weights) == 134
    assert np.dot(alf[:6], weights) / 134 == pytest.approx(alf[6], abs=0.1)


def test_tau2_averages_are_the_domains_mean():
    for m, v in paper.TABLE2_TAU2.items():
        assert np.mean(v[:3]) == pytest.approx(v[3], abs=0.05), m


def test_paper_rows_are_marked_and_follow_the_rows_run_here():
    t1 = paper.table1_rows()
    assert set(t1.source) == {paper.SOURCE_PAPER} and len(t1) == 4 * len(paper.TABLE1)
    assert t1.set_index(["benchmark", "split", "method"]).loc[("alfworld", "valid_unseen", "SkillScaffold (skill-free)"),
                                                               "avg"] == 94.8
    run = pd.DataFrame({"benchmark": ["babyai"], "split": ["test"], "method": ["GRPO"], "avg": [12.5], "n_tasks": [8]})
    both = paper.with_paper_rows(run, t1)
    assert both.source.iloc[0] == paper.SOURCE_RUN and (both.source.iloc[1:] == paper.SOURCE_PAPER).all()
    assert list(both.columns[:5]) == list(run.columns) and "heat" in both.columns
    t3 = paper.table3_rows().set_index(["benchmark", "method"])
    assert t3.loc[("webshop", "w/o abstention (no gate)"), "success_pct"] == 39.6
    assert not t3.loc[("alfworld", "w/o abstention (no gate)"), "gate"]
