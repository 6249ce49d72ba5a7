"""Call-graph numbers on hand-made libraries whose depth and density are known by construction."""
from __future__ import annotations

import json

import pytest

from skillrepro.cli import main
from skillrepro.skills import Library, parse_functions
from skillrepro.skills.callgraph import callgraph_table, graph_of, max_depth, stats


def lib(src: str, version: int = 0) -> Library:
    return Library(version, parse_functions(src))


CHAIN = '''
def a():
    return _b()
def _b():
    return _c() + _c()
def _c():
    return turn_left()
'''

# x <-> y is a cycle; main calls x; y calls leaf; lone calls nothing and nobody calls it; rec calls itself.
CYCLE = '''
def main():
    return _x(3)
def _x(n):
    return _y(n - 1) if n else 0
def _y(n):
    _leaf()
    return _x(n)
def _leaf():
    return go_forward()
def lone():
    return pick_up()
def rec(n):
    return rec(n - 1) if n else 0
'''


def test_chain_depth_density_public_share():
    s = stats(lib(CHAIN))
    # edges a->_b, _b->_c (the double call counts once): depth 2, density 2 / (3*2)
    assert (s.size, s.n_edges, s.max_depth) == (3, 2, 2)
    assert s.density == pytest.approx(2 / 6)
    assert s.n_public == 1 and s.public_share == pytest.approx(1 / 3)
    assert s.n_cycles == 0 and s.n_isolated == 0


def test_cycle_is_collapsed_self_edge_excluded_isolated_counted():
    g = graph_of(lib(CYCLE))
    assert set(g.edges) == {("main", "_x"), ("_x", "_y"), ("_y", "_x"), ("_y", "_leaf")}
    s = stats(lib(CYCLE))
    # condensation: main -> {_x,_y} -> _leaf : depth 2; rec's self-call is not an edge
    assert s.max_depth == 2
    assert s.density == pytest.approx(4 / (6 * 5))
    assert s.n_cycles == 1 and s.n_isolated == 2  # lone and rec
    assert s.public_share == pytest.approx(3 / 6)


def test_empty_and_single_function_libraries():
    assert stats(Library(0)).max_depth == 0 and stats(Library(0)).density == 0.0
    s = stats(lib("def only():\n    return 1\n"))
    assert (s.size, s.max_depth, s.density, s.n_isolated) == (1, 0, 0.0, 1)


def test_long_chain_does_not_hit_the_recursion_limit():
    nodes = tuple(f"f{i}" for i in range(3001))
    assert max_depth(nodes, tuple((f"f{i}", f"f{i + 1}") for i in range(3000))) == 3000


def test_table_and_cli(tmp_path, capsys):
    root = tmp_path / "library"
    lib("", 0).write(root / "v0")
    lib(CHAIN, 1).write(root / "v1")
    lib(CYCLE, 2).write(root / "v2")
    rows = callgraph_table(root)
    assert [(r.version, r.max_depth, r.size) for r in rows] == [(0, 0, 0), (1, 2, 3), (2, 2, 6)]
    assert main(["callgraph", str(root / "v2")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["max_depth"] == 2 and out["density"] == pytest.approx(4 / 30) and len(out["nodes"]) == 6
    assert ["_y", "_x"] in out["edges"]
    assert main(["callgraph", str(root)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [json.loads(x)["version"] for x in lines] == [0, 1, 2]
    with pytest.raises(SystemExit, match="does not exist"):
        main(["callgraph", str(tmp_path / "nope")])


def test_a_functions_source_is_the_parsers_own_segment_whatever_its_line_ends():
    """parse_functions splits the source once (ast.get_source_segment splits it again for every function, which
    made a 909-function library 12 s to parse); each function's source stays exactly the parser's segment,
    through CRLF and lone CR line ends, form feeds and the other characters str.splitlines would split on, and
    non-ASCII text before a column offset."""
    import ast

    source = ("def a(x='é\u2028'):\r\n    \"\"\"d\x0cone\"\"\"\r\n    return x\r\n\r"
              "def b(): return '\x85ü'; y = 1\n\n"
              "def c():\n    pass  # the end, no newline")
    tree = ast.parse(source)
    want = [ast.get_source_segment(source, n) for n in tree.body]
    assert [f.source for f in parse_functions(source)] == want and len(want) == 3
