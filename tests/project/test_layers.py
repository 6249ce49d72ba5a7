"""The package's layers, read from the source (every import statement, at module level or in a function).

Bottom to top: settings, records and progress; the LLM client, benchmarks, sandbox and skills; the actor;
the method registry; the runner; the methods, studies and analytics; the cross-checks, job start-up and CLIs.
A module imports only its own layer or lower ones, and no two modules import each other, directly or not.
Imports of skillrepro modules sit at the top of a module: one inside a function is a lazy import of an optional
extra, marked `# lazy: <why>` on the line above, and listed in LAZY; the registries load their entries with
importlib, not with import statements.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

from repo import ROOT

LAYERS = [
    ("settings and records", ["skillrepro.config", "skillrepro.store", "skillrepro.progress"]),
    ("llm, benchmarks, sandbox, skills", ["skillrepro.llm", "skillrepro.benchmarks", "skillrepro.skills"]),
    ("the actor", ["skillrepro.agent"]),
    ("the method registry", ["skillrepro.methods:registry"]),  # the package itself: contexts and register()
    ("the runner", ["skillrepro.runner"]),
    ("methods, studies, analytics", ["skillrepro.methods", "skillrepro.studies"]),
    ("checks, job start-up, CLIs", ["skillrepro.check", "skillrepro.pipeline", "skillrepro.cli", "*.cli",
                                    "skillrepro.export", "skillrepro.rehearsal"]),
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


PACKAGE = ROOT / "src" / "skillrepro"  # a module global: the checks' own tests point it at a planted package

# (module, imported module) -> why the import waits inside a function. Every entry is still in the source;
# a function-level import that is not here fails the test.
LAZY = {
    ("skillrepro.studies.kvcache.replay", "skillrepro.benchmarks.alfworld"):
        "optional extra `benchmarks` (alfworld, textworld), for the planner's commands only",
}



def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        out[name] = path
    return out


def _import_statements(known: dict[str, Path], module: str, tree: ast.AST):
    """(statement, the skillrepro modules it imports) for every import statement under `tree`."""
    def resolve(name: str) -> str:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        targets = {resolve(n) for n in names if n.startswith("skillrepro")} - {"", module}
        if targets:
            yield node, targets


def imports(known: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the skillrepro modules it imports anywhere in its source."""
    out: dict[str, set[str]] = {}
    for module, path in known.items():
        out[module] = set()
        for _, targets in _import_statements(known, module, ast.parse(path.read_text())):
            out[module] |= targets
    return out


def function_level_imports(known: dict[str, Path]) -> list[tuple[str, str, int, bool]]:
    """(module, imported module, line, marked with a `# lazy:` comment) of every import of a skillrepro
    module inside a function."""
    out = []
    for module, path in known.items():
        text = path.read_text()
        lines = text.splitlines()
        for fn in ast.walk(ast.parse(text)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node, targets in _import_statements(known, module, fn):
                marked = any("# lazy:" in lines[i] for i in (node.lineno - 2, node.lineno - 1) if i >= 0)
                out += [(module, t, node.lineno, marked) for t in sorted(targets)]
    return sorted(set(out))  # a nested function's imports are seen from each function around it


def test_every_module_imports_only_its_layer_or_lower_ones():
    known = modules()
    graph = imports(known)
    upward = [f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
              for m, targets in sorted(graph.items()) for t in sorted(targets)
              if layer_of(t) > layer_of(m) and not t.startswith(m + ".")]  # a package may load its entries
    assert not upward, "\n".join(upward)


def test_the_settings_module_imports_nothing_of_skillrepro():
    assert imports(modules())["skillrepro.config"] == set()


def test_the_study_contract_imports_only_the_settings():
    """The contract is the studies' common floor: each study's package imports it to declare itself, and
    skillrepro.check, above them all, lists the declarations."""
    assert imports(modules())["skillrepro.studies.contract"] == {"skillrepro.config"}


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


def test_skillrepro_modules_are_imported_at_the_top_but_for_marked_optional_extras():
    found = function_level_imports(modules())
    unlisted = [f"{m}:{line} imports {t} inside a function: move it to the top, or (an optional extra) mark it "
                f"`# lazy: <why>` and list it in LAZY" for m, t, line, _ in found if (m, t) not in LAZY.keys()]
    unmarked = [f"{m}:{line} imports {t} lazily without a `# lazy: <why>` comment above it"
                for m, t, line, marked in found if (m, t) in LAZY and not marked]
    present = {(m, t) for m, t, _, _ in found}
    stale = [f"{m} -> {t} is listed but no longer imported in a function: remove it from the list"
             for m, t in sorted((LAZY.keys()) - present)]
    assert not unlisted + unmarked + stale, "\n".join(unlisted + unmarked + stale)


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


def test_the_import_check_sees_a_function_level_import(tmp_path, monkeypatch):
    """An unmarked import inside a function, one marked `# lazy:` and one at the top are told apart."""
    fake = tmp_path / "skillrepro"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "store.py").write_text("")
    (fake / "runner.py").write_text(
        "from skillrepro import store\n\ndef play():\n    from skillrepro.store import x\n\n"
        "def extra():\n    # lazy: an optional extra\n    import skillrepro.store\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert function_level_imports(modules()) == [("skillrepro.runner", "skillrepro.store", 4, False),
                                                 ("skillrepro.runner", "skillrepro.store", 8, True)]
