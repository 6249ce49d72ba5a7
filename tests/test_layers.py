"""The package's layers, read from the source (every import statement, at module level or in a function).

Bottom to top: settings, records and progress; the LLM client, benchmarks, sandbox and skills; the actor;
the method registry; the runner; the methods, studies and analytics; the cross-checks, job start-up and CLIs.
A module imports only its own layer or lower ones, and no two modules import each other, directly or not.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "skillrepro"

LAYERS = [
    ("settings and records", ["skillrepro.config", "skillrepro.store", "skillrepro.progress"]),
    ("llm, benchmarks, sandbox, skills", ["skillrepro.llm", "skillrepro.benchmarks", "skillrepro.skills"]),
    ("the actor", ["skillrepro.agent"]),
    ("the method registry", ["skillrepro.methods:registry"]),  # the package itself: contexts and register()
    ("the runner", ["skillrepro.runner"]),
    ("methods, studies, analytics", ["skillrepro.methods", "skillrepro.studies", "skillrepro.analysis",
                                     "skillrepro.views"]),
    ("checks, job start-up, CLIs", ["skillrepro.check", "skillrepro.pipeline", "skillrepro.cli", "*.cli"]),
]


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        out[name] = path
    return out


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


def imports(known: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the skillrepro modules it imports anywhere in its source."""
    def resolve(name: str) -> str:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name

    out: dict[str, set[str]] = {}
    for module, path in known.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            targets |= {resolve(n) for n in names if n.startswith("skillrepro")}
        out[module] = targets - {"", module}
    return out


def test_every_module_imports_only_its_layer_or_lower_ones():
    known = modules()
    graph = imports(known)
    upward = [f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
              for m, targets in sorted(graph.items()) for t in sorted(targets)
              if layer_of(t) > layer_of(m) and not t.startswith(m + ".")]  # a package may load its entries
    assert not upward, "\n".join(upward)


def test_the_settings_module_imports_nothing_of_skillrepro():
    assert imports(modules())["skillrepro.config"] == set()


def test_no_import_cycle():
    graph = imports(modules())
    # a package importing its entries (a registry) is not a cycle with the entries importing the package
    graph = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_the_layer_check_sees_a_planted_violation(tmp_path, monkeypatch):
    """The checks above would fail: a store module that imports the runner is reported."""
    fake = tmp_path / "skillrepro"
    for rel, text in {"__init__.py": "", "store.py": "from skillrepro.runner import run_batch\n",
                      "runner.py": "from skillrepro import store\n"}.items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    graph = imports(modules())
    assert graph["skillrepro.store"] == {"skillrepro.runner"}
    assert layer_of("skillrepro.runner") > layer_of("skillrepro.store")
