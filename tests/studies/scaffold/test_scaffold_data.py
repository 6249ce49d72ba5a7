"""SkillScaffold's WebShop and tau2-bench loaders on small data written in their real layouts."""
from __future__ import annotations

import json
import random

import pytest

from skillrepro.studies.scaffold.data import (ID_DOMAINS, OOD_DOMAINS, informative_tasks, load_tau2_tasks,
                                              load_webshop_goals, webshop_domain, webshop_splits)

KINDS = ["long sleeve button down shirt", "wireless bluetooth headphones", "running shoes", "moisturizer cream",
         "leather wallet", "throw pillow covers", "dog treats"]


@pytest.fixture()
def webshop_dir(tmp_path):
    rng = random.Random(1)
    products, human = [], {}
    for i in range(700):
        asin = f"B{i:09d}"
        products.append({"asin": asin, "name": f"item {i}", "category": "x", "query": "q"})
        human[asin] = [{"asin": asin, "instruction": f"i need {KINDS[(i + k) % len(KINDS)]} size {k}",
                        "instruction_attributes": ["a"] if (i + k) % 9 else [], "instruction_options": ["o"]}
                       for k in range(3)]
    products.append(dict(products[0]))  # a duplicate ASIN, as the real file has: read once
    products.append({"asin": "", "name": "no asin"})
    rng.shuffle(products)
    (tmp_path / "items_shuffle.json").write_text(json.dumps(products))
    (tmp_path / "items_human_ins.json").write_text(json.dumps(human))
    return tmp_path


def test_domain_rule():
    assert webshop_domain("i need running shoes for men, size 10") == "Footwear"
    assert webshop_domain("a long sleeve shirt, v neck") == "Apparel"
    assert webshop_domain("usb c charger cable 6 ft") == "Electronics"
    assert webshop_domain("hair conditioner for dry hair") == "Beauty & Health"
    assert webshop_domain("leather wallet with coin pocket") == "Accessories"
    assert webshop_domain("throw pillow covers 18x18") == "Home Decor"
    assert webshop_domain("dog treats, grain free") == "Other"


def test_webshop_goals_in_webshops_order(webshop_dir):
    goals = load_webshop_goals(webshop_dir)
    # 700 products x 3 instructions, minus those without attributes; the duplicate ASIN adds nothing
    expected = sum(1 for i in range(700) for k in range(3) if (i + k) % 9)
    assert len(goals) == expected and [g.index for g in goals] == list(range(expected))
    assert goals == load_webshop_goals(webshop_dir)  # the shuffle is WebShop's fixed seed
    assert {g.pool for g in goals[:500]} == {"test"} and goals[500].pool == "dev" and goals[1500].pool == "train"


def test_webshop_category_split(webshop_dir):
    goals = load_webshop_goals(webshop_dir)
    s = webshop_splits(goals, other_train=20, other_val=10)
    assert all(g.index >= 1500 and g.domain in ID_DOMAINS for g in s["train"])
    assert all(g.index < 1500 and g.domain in ID_DOMAINS for g in s["id_val"])
    assert all(g.index < 1500 and g.domain in OOD_DOMAINS for g in s["ood_val"])
    assert sum(g.domain == "Other" for g in s["train"]) == 20 and sum(g.domain == "Other" for g in s["id_val"]) == 10
    assert {g.domain for g in s["ood_val"]} == set(OOD_DOMAINS)
    # Nothing held out leaks into training.
    assert not {g.index for g in s["train"]} & {g.index for g in s["id_val"] + s["ood_val"]}


def test_webshop_missing_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="items_human_ins.json"):
        load_webshop_goals(tmp_path)


def test_tau2_tasks(tmp_path):
    for dom in ("airline", "retail"):
        d = tmp_path / "domains" / dom
        d.mkdir(parents=True)
        (d / "policy.md").write_text(f"# {dom} policy")
        (d / "tasks.json").write_text(json.dumps([
            {"id": "0", "user_scenario": {"instructions": {"reason_for_call": "change flight", "known_info": "id 7"}},
             "evaluation_criteria": {"actions": [{"name": "get_user_details"}, {"name": "update"}]}},
            {"id": "1", "user_scenario": {"instructions": "cancel my order"}},
        ]))
    tasks = load_tau2_tasks(tmp_path, ["airline", "retail"])
    assert [(t.domain, t.task_id, t.n_actions) for t in tasks] == [("airline", "0", 2), ("airline", "1", 0),
                                                                   ("retail", "0", 2), ("retail", "1", 0)]
    assert "reason_for_call: change flight" in tasks[0].instructions and tasks[0].policy == "# airline policy"
    with pytest.raises(FileNotFoundError, match="domains/telecom/tasks.json"):
        load_tau2_tasks(tmp_path)
    with pytest.raises(ValueError, match="'mail'"):
        load_tau2_tasks(tmp_path, ["mail"])
    assert informative_tasks({"a": (0, 4), "b": (2, 4), "c": (4, 4), "d": (1, 8)}) == ["b", "d"]


@pytest.mark.workflow
def test_webshop_split_rule(webshop_dir, tmp_path):
    import os
    import subprocess
    import sys

    import pandas as pd

    from repo import study_workflow

    wd = tmp_path / "wf"
    wd.mkdir()
    study_workflow(wd, {"llm": {"backend": "embedded", "model": "smollm2-135m"}, "benchmarks": {"babyai": {"env": "babyai"}},
                        "scaffold": {"webshop_data": str(webshop_dir)}})
    proc = subprocess.run([sys.executable, "-m", "snakemake", "results/tables/scaffold_webshop_split.csv",
                           "--cores", "1"], cwd=wd, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = pd.read_csv(wd / "results/tables/scaffold_webshop_split.csv")
    splits = json.loads((wd / "results/scaffold/webshop/splits.json").read_text())
    assert counts.n_goals.sum() == sum(len(v) for v in splits.values())
    assert set(counts.split) == {"train", "id_val", "ood_val"}
