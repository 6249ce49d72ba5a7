"""Call-graph statistics of a library version, and the `skillrepro callgraph PATH` command.

Nodes are the library's functions; an edge f -> g means f's body calls g by name (self-calls excluded).
Edges come from the source (`parse_functions`), so a stale manifest cannot mislead the numbers.

Maximum depth is the number of edges on the longest directed path of the *condensation*: each strongly
connected component (a set of mutually recursive functions) is collapsed to one node first, so the
number is defined, and computable in linear time, when the graph has cycles. A cycle therefore counts as
one level: a -> b -> a -> c has depth 1 (the component {a, b}, then c). An acyclic library's depth is its
longest call chain in edges (a single function, or none, has depth 0).

Density is |E| / (|V| (|V| - 1)), 0 for fewer than two functions.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from skillrepro.skills.library import Library, parse_functions
from skillrepro.store import read_lines


@dataclass(frozen=True)
class CallGraph:
    nodes: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]
    public: tuple[str, ...]


@dataclass(frozen=True)
class CallGraphStats:
    version: int
    size: int  # number of functions
    n_public: int
    public_share: float
    n_edges: int
    max_depth: int
    density: float
    n_cycles: int  # strongly connected components with more than one function
    n_isolated: int  # functions that neither call nor are called by another


def graph_of(library: Library) -> CallGraph:
    parsed = {f.name: f for f in parse_functions(library.source)} if library.functions else {}
    nodes = tuple(f.name for f in library.functions)
    edges = tuple(sorted({(f, c) for f in nodes for c in (parsed[f].callees if f in parsed else ())
                          if c in parsed and c != f}))
    return CallGraph(nodes, edges, tuple(f.name for f in library.functions if f.public))


def strongly_connected(nodes: tuple[str, ...], edges: tuple[tuple[str, str], ...]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (a long call chain must not hit Python's recursion limit)."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        succ[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    comps: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    comps.append(comp)
    return comps


def max_depth(nodes: tuple[str, ...], edges: tuple[tuple[str, str], ...]) -> int:
    """Longest path, in edges, of the condensation DAG (see the module docstring)."""
    comps = strongly_connected(nodes, edges)
    comp_of = {n: i for i, c in enumerate(comps) for n in c}
    dag = {(comp_of[a], comp_of[b]) for a, b in edges if comp_of[a] != comp_of[b]}
    # Tarjan emits components in reverse topological order: callees before callers.
    longest = [0] * len(comps)
    out: dict[int, list[int]] = {}
    for a, b in dag:
        out.setdefault(a, []).append(b)
    for i in range(len(comps)):
        longest[i] = max((longest[j] + 1 for j in out.get(i, ())), default=0)
    return max(longest, default=0)


def stats(library: Library) -> CallGraphStats:
    g = graph_of(library)
    n, e = len(g.nodes), len(g.edges)
    touched = {a for a, _ in g.edges} | {b for _, b in g.edges}
    comps = strongly_connected(g.nodes, g.edges)
    return CallGraphStats(
        version=library.version, size=n, n_public=len(g.public), public_share=len(g.public) / n if n else 0.0,
        n_edges=e, max_depth=max_depth(g.nodes, g.edges), density=e / (n * (n - 1)) if n > 1 else 0.0,
        n_cycles=sum(1 for c in comps if len(c) > 1), n_isolated=sum(1 for x in g.nodes if x not in touched),
    )


def library_versions(library_root: str | Path) -> list[Path]:
    """Complete version folders v0, v1, ... under `library_root`, in version order."""
    root = Path(library_root)
    found = [p for p in root.glob("v*") if p.is_dir() and p.name[1:].isdigit() and (p / "manifest.json").is_file()]
    return sorted(found, key=lambda p: int(p.name[1:]))


def callgraph_table(library_root: str | Path) -> list[CallGraphStats]:
    """One row per complete library version under `library_root` (for results/tables/callgraph.csv)."""
    return [stats(Library.load(p)) for p in library_versions(library_root)]


def describe(folder: str | Path) -> dict:
    """The JSON the CLI prints for one version folder (manifest.json, or a bare skills.py)."""
    folder = Path(folder)
    if (folder / "manifest.json").is_file():
        lib = Library.load(folder)
    elif (folder / "skills.py").is_file() or folder.suffix == ".py":
        src_file = folder if folder.suffix == ".py" else folder / "skills.py"
        try:
            lib = Library(-1, parse_functions("\n".join(read_lines(src_file, "skills file"))))
        except SyntaxError as e:
            raise SyntaxError(f"{src_file}:{e.lineno}: {e.msg}") from None
    else:
        raise FileNotFoundError(f"{folder}: neither a library version (manifest.json / skills.py) "
                                f"nor a library root with v0, v1, ... folders")
    g = graph_of(lib)
    return {"path": str(folder), "nodes": list(g.nodes), "edges": [list(e) for e in g.edges],
            "public": list(g.public)} | asdict(stats(lib))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("callgraph")  # its help: skillrepro.cli.COMMANDS
    p.add_argument("path", help="a version folder (v3/), a skills.py, or a library root holding v0, v1, ...")
    p.set_defaults(func=_cli)


def _cli(a: argparse.Namespace) -> int:
    path = Path(a.path)
    if not path.exists():
        raise SystemExit(f"skillrepro callgraph: {path} does not exist")
    versions = library_versions(path) if path.is_dir() and not (path / "manifest.json").exists() else []
    try:
        for item in versions or [path]:
            print(json.dumps(describe(item)))
    except (FileNotFoundError, SyntaxError, ValueError, KeyError) as e:
        raise SystemExit(f"skillrepro callgraph: {e}")
    return 0
