"""The paper-scale presets run SpeedRunner's study as configs/paper.yaml does: every method variant they share
with paper.yaml has its method and options, so that a comparison across models (figures 9-11, table 7), on
vLLM, or under distribution shift (section 6.4) changes the model or the tasks, never a method's settings
unnoticed. A difference made on purpose is listed in ALLOWED with the docs sentence that explains it."""
from __future__ import annotations

from pathlib import Path

import pytest
from snakemake.utils import update_config

from skillrepro.config import load_yaml
from repo import ROOT

CONFIGS = ROOT / "configs"
PAPER = CONFIGS / "paper.yaml"
# SpeedRunner's study at paper scale, as each header comment says: the cross-model comparison (appendix G.2),
# paper.yaml on an open-weight model (given after it), the distribution shift (section 6.4).
PAPER_SCALE = ("cross-model-gemini-3-flash.yaml", "cross-model-gpt-5.4-mini.yaml", "cross-model-qwen3.5-27b.yaml",
               "paper-vllm.yaml", "shift.yaml")
# (preset, variant) -> (a page under docs/, the sentence there that says why its method or options differ)
ALLOWED: dict[tuple[str, str], tuple[str, str]] = {}


def as_run(preset: Path) -> dict:
    """The config a run of `preset` reads: Snakemake's merge over the preset it is given after, if its
    header says so ("add configs/<preset> after this file", as tests/test_config.py reads it)."""
    merged: dict = {}
    for p in sorted(CONFIGS.glob("*.yaml")):
        if f"add configs/{preset.name} after this file" in p.read_text():
            update_config(merged, load_yaml(p))
    update_config(merged, load_yaml(preset))
    return merged


def settings(variant: dict) -> dict:
    """What a variant runs, its benchmarks aside (a preset may run a variant on fewer of them)."""
    return {"method": variant["method"], "options": variant.get("options") or {}}


@pytest.mark.parametrize("name", PAPER_SCALE)
def test_a_paper_scale_preset_runs_paper_yaml_s_methods(name):
    paper = load_yaml(PAPER)["methods"]
    methods = as_run(CONFIGS / name)["methods"]
    differ = {v: (settings(methods[v]), settings(paper[v])) for v in methods.keys() & paper.keys()
              if settings(methods[v]) != settings(paper[v]) and (name, v) not in ALLOWED}
    assert not differ, f"{name} differs from paper.yaml in (variant: (preset's, paper.yaml's)): {differ}"


def test_the_list_holds_every_paper_scale_preset_and_each_allowed_difference_is_documented():
    """A new preset at paper.yaml's protocol scale is checked too; an allowed difference cites real docs."""
    scale = {k: load_yaml(PAPER)["protocol"][k] for k in ("seeds", "train_rollouts")}
    at_scale = {p.name for p in CONFIGS.glob("*.yaml") if p != PAPER
                and {k: (as_run(p).get("protocol") or {}).get(k) for k in scale} == scale}
    assert at_scale == set(PAPER_SCALE)
    for (preset, variant), (page, sentence) in ALLOWED.items():
        assert preset in PAPER_SCALE and variant in load_yaml(PAPER)["methods"], (preset, variant)
        assert sentence in " ".join((ROOT / "docs" / page).read_text().split()), (page, sentence)
