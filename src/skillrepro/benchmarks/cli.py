"""`skillrepro env tasks|replay`: look at any benchmark's task sampler, or replay primitive calls by hand.

Generic over every benchmark: the benchmark is resolved by name through `get_benchmark`, so a new benchmark
module needs nothing here.

    skillrepro env tasks scienceworld --split test --option family=classification --limit 5
    skillrepro env replay crafter --task 123 --calls calls.txt

A calls file holds one primitive call per line in Python call syntax, e.g. `connect("battery anode", "red wire
terminal 1")` or `move_north()`; blank lines and `#` comments are skipped. Lines are parsed with `ast`, and only
literal arguments are accepted (nothing is evaluated).
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from skillrepro.benchmarks import ActionError, TaskError, get_benchmark, names
from skillrepro.store import InputFileError, read_lines, shorten

DEFAULT_COUNTS = {"train": 200, "test": 30}


@dataclass(frozen=True)
class Call:
    line: int
    text: str
    name: str
    args: list[Any]


class CallsFileError(ValueError):
    """A line of a calls file that is not one primitive call with literal arguments."""


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """`k=v` pairs into benchmark options; values are typed as YAML scalars (0 -> int, true -> bool)."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CallsFileError(f"--option must look like key=value, got {pair!r}")
        out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
    return out


def parse_call(text: str, line: int = 0, where: str = "<calls>") -> Call:
    """One line of Python call syntax -> Call; keyword arguments are kept as (name, value) to bind later."""
    shown = repr(shorten(text.strip()))
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise CallsFileError(f"{where}:{line}: not Python call syntax ({e.msg}): {shown}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise CallsFileError(f"{where}:{line}: expected one call like name(arg, ...), got {shown}")
    try:
        args: list[Any] = [ast.literal_eval(a) for a in node.args]
        kwargs = [(k.arg, ast.literal_eval(k.value)) for k in node.keywords]
    except ValueError:
        raise CallsFileError(f"{where}:{line}: arguments must be literals (strings, numbers): {shown}") from None
    if any(k is None for k, _ in kwargs):
        raise CallsFileError(f"{where}:{line}: **kwargs are not allowed: {shown}")
    return Call(line, text.strip(), node.func.id, args + [_Keyword(k, v) for k, v in kwargs])


@dataclass(frozen=True)
class _Keyword:
    name: str
    value: Any


def read_calls(path: Path) -> list[Call]:
    try:
        lines = read_lines(path, "calls file")
    except InputFileError as e:
        raise CallsFileError(str(e)) from None
    calls = []
    for i, raw in enumerate(lines, start=1):
        if raw.strip() and not raw.strip().startswith("#"):
            calls.append(parse_call(raw, i, str(path)))
    return calls


def bind(call: Call, params: tuple[tuple[str, str], ...]) -> list[Any]:
    """Positional argument list for a primitive, with keyword arguments put in their places."""
    names = [n for n, _ in params]
    positional = [a for a in call.args if not isinstance(a, _Keyword)]
    out: list[Any] = list(positional)
    for kw in (a for a in call.args if isinstance(a, _Keyword)):
        if kw.name not in names:
            raise CallsFileError(f"line {call.line}: {call.name}() has no parameter {kw.name!r}")
        idx = names.index(kw.name)
        while len(out) <= idx:
            out.append(_MISSING)
        if out[idx] is not _MISSING:
            raise CallsFileError(f"line {call.line}: {call.name}() got {kw.name!r} twice")
        out[idx] = kw.value
    if _MISSING in out:
        raise CallsFileError(f"line {call.line}: {shorten(call.text)} leaves a parameter of {call.name}() unset")
    return out


_MISSING = object()


def register(sub: argparse._SubParsersAction) -> None:
    env = sub.add_parser("env")  # its help: skillrepro.cli.COMMANDS
    env_sub = env.add_subparsers(dest="env_command", required=True)

    p = env_sub.add_parser("tasks", help="print the task ids the sampler draws, one per line")
    p.add_argument("benchmark", help=f"benchmark env name ({', '.join(names())})")
    p.add_argument("--split", choices=["train", "test"], required=True)
    p.add_argument("--n", type=int, default=None, help="how many to draw (default: 200 train, 30 test)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--limit", type=int, default=None, help="print only the first N of the draw")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="benchmark option")
    p.set_defaults(func=_tasks)

    p = env_sub.add_parser("replay", help="replay primitive calls from a file; print each observation")
    p.add_argument("benchmark")
    p.add_argument("--task", required=True, help="task id, as `env tasks` prints it")
    p.add_argument("--calls", required=True, type=Path, help="one primitive call per line, Python call syntax")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="benchmark option")
    p.set_defaults(func=_replay)


def _tasks(a: argparse.Namespace) -> int:
    try:
        bench = get_benchmark(a.benchmark, **parse_options(a.option))
        n = a.n if a.n is not None else DEFAULT_COUNTS[a.split]
        ids = bench.sample_tasks(a.split, n, a.seed)
    except (TaskError, CallsFileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for task_id in ids[: a.limit] if a.limit is not None else ids:
        print(task_id)
    return 0


def _replay(a: argparse.Namespace) -> int:
    try:
        bench = get_benchmark(a.benchmark, **parse_options(a.option))
        calls = read_calls(a.calls)  # a bad file stops before the env starts
        env = bench.make(a.task)
    except (TaskError, CallsFileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    prims = {p.name: p for p in bench.primitives()}
    try:
        print(env.reset())
        for call in calls:
            print(f"\n>>> {shorten(call.text)}")
            try:
                if call.name not in prims:
                    raise ActionError(f"unknown action {call.name!r}; valid actions: {', '.join(prims)}")
                result = env.step(call.name, bind(call, prims[call.name].params))
                print(result.observation)
            except (ActionError, CallsFileError) as e:
                # As the agent would: a bad call is reported and the replay goes on.
                print(f"ActionError: {e}")
        summary = {
            "score": env.score(),
            "success": bool(env.success()),
            "done": bool(env.done),
            "steps": env.n_primitive_steps,
        }
    finally:
        env.release()
    print(json.dumps(summary))
    return 0
