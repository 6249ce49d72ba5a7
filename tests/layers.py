"""The package's layers, bottom to top, and the layer of a module: tests/project/test_layers.py holds every
import of the source to them, tests/studies/test_study_contract.py the modules a study's declaration names.
A module of its own so that the two share the table without one test module importing the other."""
from __future__ import annotations

LAYERS = [
    ("settings and records", ["skillrepro.config", "skillrepro.store", "skillrepro.progress"]),
    ("llm, benchmarks, sandbox, skills", ["skillrepro.llm", "skillrepro.benchmarks", "skillrepro.skills"]),
    ("the actor", ["skillrepro.agent"]),
    ("the method registry", ["skillrepro.methods:registry"]),  # the package itself: contexts and register()
    ("the runner", ["skillrepro.runner"]),
    ("methods, studies, analytics", ["skillrepro.methods", "skillrepro.studies"]),
    ("checks, job start-up, CLIs", ["skillrepro.check", "skillrepro.pipeline", "skillrepro.cli", "*.cli",
                                    "skillrepro.export"]),
]


def layer_of(module: str) -> int:
    """The layer whose longest prefix names `module` (every `*.cli` module is a CLI, on top)."""
    if module.endswith(".cli"):
        return len(LAYERS) - 1
    if module == "skillrepro.methods":
        module = "skillrepro.methods:registry"
    matches = [(len(p), i) for i, (_, prefixes) in enumerate(LAYERS) for p in prefixes
               if module == p or module.startswith(p + ".")]
    assert matches, f"{module} is in no layer: add it to LAYERS"
    return max(matches)[1]
