"""SpeedRunner's write gate: the working copy of the library (`Session`) and the checks a written function passes
before it is kept. A write parses, hides no primitive and loads in the sandbox with the rest of the library;
under the inducer limits require_action and require_defined, a public function that reaches no primitive action
is kept private (refused where every function is public), and one using a name bound nowhere a skill runs is
refused. Each refusal is answered with why (`refusal_kind` counts them by kind). `replay_check: true` (a
deviation, off by default) also runs a new zero-argument function on a past training task, which the online
protocol otherwise forbids (appendix E, section 2).
"""
from __future__ import annotations

import ast
import builtins
import re
import symtable
from dataclasses import dataclass, field, replace

from skillrepro.methods.common import PREFIX_TRIES, SMOKE_LIMITS, load_check
from skillrepro.methods.speedrunner_protocol import NOTEBOOK_NAMES
from skillrepro.skills.library import MAX_SOURCE_CHARS, Library, SkillFunction, parse_functions, parse_untrusted
from skillrepro.skills.isolation import SandboxPolicy
from skillrepro.skills.sandbox import SandboxSession


@dataclass
class Session:
    """The working copy of the library and what the session did."""

    functions: dict[str, SkillFunction]
    primitives: set[str]
    all_public: bool
    policy: SandboxPolicy = SandboxPolicy()  # what every sandbox the session starts must have
    require_action: bool = False  # inducer.require_action: a public function must reach a primitive
    require_defined: bool = False  # inducer.require_defined: every name a function uses is bound where skills run
    observes: str = ""  # an argument-less primitive that returns the text the agent sees, for the refusals' hints
    transcript: list[dict] = field(default_factory=list)
    writes_ok: int = 0
    finished: bool = False
    # inducer.repeat_notice: (tool, code) -> the request that first ran it since the library last changed
    asked: dict[tuple[str, str], int] = field(default_factory=dict)

    def library_text(self) -> str:
        if not self.functions:
            return "(the library is empty)"
        return "\n\n".join(f"# {'public' if f.public else 'private'}\n{f.source}" for f in self.functions.values())


def smoke_check(functions: dict[str, SkillFunction], new: list[str], bench, task_ids: list[str],
                policy: SandboxPolicy) -> str:
    """Replay check (option `replay_check`, off in every paper preset): '' if the library loads and each new
    function without required arguments runs on a fresh past training task without raising."""
    lib = Library(0, tuple(functions.values()))
    env = bench.make(task_ids[0]) if task_ids else None
    if env is None:
        return load_check(functions, policy)
    env.reset()
    s = SandboxSession(source=lib.source, env=env, limits=SMOKE_LIMITS, policy=policy)
    try:
        for name in new:
            f = functions[name]
            node = parse_untrusted(f.source).body[0]
            required = len(node.args.args) - len(node.args.defaults)
            out = s.call_skill(name, []) if required == 0 else None
            if s.load_error:
                return f"the library does not load: {s.load_error}"
            if out is not None and (out.killed or (out.exception and not out.exception.startswith(("EpisodeOver", "SandboxLimit: limit")))):
                why = out.killed or out.exception
                return f"{name}() failed on recorded task {task_ids[0]}: {why}\n{out.traceback[-800:]}"
        if not new and (error := s.load()):
            return f"the library does not load: {error}"
        return ""
    finally:
        s.close()
        env.release()


def _reads(source: str) -> set[str]:
    """The global names a function's source reads: what it calls, and what it holds as a value (the reference
    library reaches its primitives through a dict of them, {"pick_up": pick_up, ...}). Not a name the function
    binds itself: `pick_up = f"pick_up({obj})"` is a string, not the action (the 1.5B inducer's public
    `pick_up_and_go_to` returned such strings, counted as acting, and was called 12 times an episode to no effect)."""
    out: set[str] = set()
    tables = symtable.symtable(source, "<skill>", "exec").get_children()
    while tables:
        table = tables.pop()
        out |= {s.get_name() for s in table.get_symbols()
                if s.is_global() and s.is_referenced() and not s.is_assigned()}
        tables.extend(table.get_children())
    return out


def _idle(names: list[str], reads: dict[str, set[str]], primitives: set[str]) -> list[str]:
    """Those of `names` that reach no primitive action, themselves or through the library functions they read."""
    def acts(name: str) -> bool:
        seen, todo = set(), [name]
        while todo:
            n = todo.pop()
            if n not in seen and n in reads:
                seen.add(n)
                if reads[n] & primitives:
                    return True
                todo.extend(reads[n])
        return False
    return [n for n in names if not acts(n)]


def _called(source: str) -> set[str]:
    """The bare names a function's source calls."""
    return {n.func.id for n in ast.walk(parse_untrusted(source)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def _parameters(source: str) -> tuple[ast.FunctionDef | None, list[str]]:
    """A function's definition and its parameters' names, in order (None, [] without a def)."""
    fn = next((n for n in ast.walk(parse_untrusted(source)) if isinstance(n, ast.FunctionDef)), None)
    if fn is None:
        return None, []
    a = fn.args
    return fn, [x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x is not None]


def _unread_parameters(source: str) -> list[str]:
    """The parameters a function never reads: the actor fills them (`pick_up_and_move("purple ball", "yellow
    key")`) and the function does the same whatever they say (002b237: `pick_up(); go_forward()`)."""
    fn, params = _parameters(source)
    read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} if fn else set()
    return [p for p in params if p not in read]


def _calls_a_parameter(source: str) -> bool:
    """Whether a function calls one of its own parameters (`action()` in `repeat_until(text, action)`): it acts
    when a caller passes it an action, which the agent, calling with text and numbers, cannot."""
    fn, params = _parameters(source)
    return fn is not None and any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in params
                                  for c in ast.walk(fn))


# Bound in the namespace a skill runs in (skills/_worker.py), beside the primitives and the library's functions.
SKILL_GLOBALS = frozenset(dir(builtins)) | {"ActionError", "SandboxLimit", "__name__"}


def _unbound(source: str, known: set[str]) -> list[str]:
    """The global names a function's source reads that are bound nowhere a skill runs: not in `known` (the
    primitives and the library's functions), not a builtin, not assigned by the function itself. Each would
    raise NameError when the function runs."""
    return sorted(_reads(source) - known - SKILL_GLOBALS)


def _move_imports(code: str, tree: ast.Module) -> tuple[str, ast.Module, dict[str, list[str]]]:
    """The block's top-level imports, copied into each function that uses a name they bind (a library keeps
    functions only, so `import re` above a function that calls re.match would leave it a NameError at every
    call; the 1.5B inducer writes imports there). Returns the new code, its tree and function -> imports."""
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    binds = {(a.asname or a.name).split(".")[0]: ast.get_source_segment(code, n) or ast.unparse(n)
             for n in imports for a in n.names if a.name != "*"}
    lines, moved = code.splitlines(), {}
    for fn in sorted((n for n in tree.body if isinstance(n, ast.FunctionDef)), key=lambda n: -n.lineno):
        body = fn.body[1:] if ast.get_docstring(fn) is not None and len(fn.body) > 1 else fn.body
        names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
        used = list(dict.fromkeys(text for name, text in binds.items() if name in names))  # `import os, re`: once
        if used and body[0].lineno > fn.lineno:  # not a one-line `def f(): ...`
            at = body[0].lineno - 1
            lines[at:at] = [" " * body[0].col_offset + text for text in used]
            moved[fn.name] = used
    if not moved:
        return code, tree, {}
    code = "\n".join(lines)
    return code, parse_untrusted(code), moved


def refusal_kind(observation: str) -> str:
    """A refused write's reason with its names, numbers and quoted text taken out, for counting refusals
    by kind across sessions (perf/sleep_replay.py, perf/learning_report.py)."""
    text = re.sub(r"\(line \d+\)|'[^'\n]*'|\"[^\"\n]*\"|\d+", "_", observation.removeprefix("Error: ").split(". ")[0])
    return text[:70]


def write_function(sess: Session, code: str, public: bool | None, bench, task_ids: list[str],
                   replay: bool = False) -> str:
    if not code.strip():
        return "Error: no code block found; put the function in a ```python block."
    dropped = ""
    try:
        tree = parse_untrusted(code)
    except SyntaxError as e:
        # A reply cut off by the token limit ends in half a function: keep the complete ones before it.
        lines = code.splitlines()
        starts = [n for n in range(len(lines) - 1, 0, -1) if lines[n].startswith("def ")][:PREFIX_TRIES]
        cut = next((n for n in starts if len(code) <= MAX_SOURCE_CHARS and _parses("\n".join(lines[:n]))), None)
        if cut is None:
            return f"Error: the code does not parse: {e.msg} (line {e.lineno}). Nothing was saved."
        dropped = f" (lines {cut + 1}-{len(lines)} did not parse and were dropped: {e.msg})"
        code = "\n".join(lines[:cut])
        tree = parse_untrusted(code)
    code, tree, moved = _move_imports(code, tree)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not defs:
        return "Error: no function definition (def name(...):) in the code block. Nothing was saved."
    copied = {text for texts in moved.values() for text in texts}
    other = [ast.unparse(n).splitlines()[0] for n in tree.body if not isinstance(n, ast.FunctionDef)
             and (ast.get_source_segment(code, n) or ast.unparse(n)) not in copied]
    clash = [d.name for d in defs if d.name in sess.primitives]
    if clash:
        return f"Error: {', '.join(clash)} would hide a primitive action of the same name. Nothing was saved."
    parsed = parse_functions(code)
    candidate = dict(sess.functions)
    for f in parsed:
        is_public = True if sess.all_public else (public if public is not None else not f.name.startswith("_"))
        if public is True and len(parsed) > 1 and f.name.startswith("_") and not sess.all_public:
            is_public = False  # helpers written next to a public function stay private
        candidate[f.name] = SkillFunction(f.name, is_public, f.signature, f.doc, f.source, f.callees)
    # Callees were computed within the written block; recompute over the whole library.
    whole = {f.name: f for f in parse_functions(Library(0, tuple(candidate.values())).source)}
    candidate = {n: SkillFunction(n, c.public, c.signature, c.doc, c.source, whole[n].callees) for n, c in candidate.items()}
    reads = {n: _reads(f.source) for n, f in candidate.items()} if sess.require_action else {}
    idle = _idle([f.name for f in parsed if candidate[f.name].public], reads, sess.primitives) if reads else []
    how = ""
    if idle:
        # The 1.5B inducer's commonest mistake: acting through the notebook, db.execute_query("pick_up()").
        notebook = sorted({n for f in idle for n in reads[f] & NOTEBOOK_NAMES})
        if notebook:
            how += (f"; {', '.join(notebook)} exist only in execute_code's notebook, not where the agent runs a "
                    f"skill: call an action by its name, {sorted(sess.primitives)[0]}(), not db.execute_query(...)")
        # a call of a function written nowhere (the protocol's example, unsaved) is why many reach no action
        known = sess.primitives | set(candidate) | NOTEBOOK_NAMES
        if nowhere := {f: names for f in idle if (names := _unbound(candidate[f].source, known))}:
            uses = "; ".join(f"{f} uses {', '.join(n)}" for f, n in nowhere.items())
            how += f"; {uses}, defined nowhere a skill runs (not an action, a library function or a builtin)"
        # the inducers generalised the protocol's example loop into repeat_action_until(text, action)
        if passed := [n for n in idle if _calls_a_parameter(candidate[n].source)]:
            how += f"; {', '.join(passed)} call(s) a function passed in, which the agent, passing text, cannot"
    if idle and sess.all_public:
        return (f"Error: {', '.join(idle)} call(s) no primitive action, directly or through library functions: a "
                f"skill acts by calling them ({', '.join(sorted(sess.primitives)[:4])}, ...; returning an action's "
                f"name as text does nothing{how}). Nothing was saved.")
    # Otherwise such a function is kept, private: out of the agent's list, where it would do nothing, and there
    # for a public function that acts to call. Refused instead, a helper written alone before the function that
    # uses it sank both (the inducers wrote parse_mission, then a function calling it, each refused in turn).
    for name in idle:
        candidate[name] = replace(candidate[name], public=False)
    written = ", ".join(f"{f.name} ({'public' if candidate[f.name].public else 'private'})" for f in parsed)
    if all((had := sess.functions.get(f.name)) is not None and had.source == candidate[f.name].source
           and had.public == candidate[f.name].public for f in parsed):
        # the inducers saved the same code again and again (5 of 6 requests of a sleep phase at 002b237)
        nothing_public = not any(candidate[f.name].public for f in parsed)
        return (f"Unchanged: {written} is in the library already, word for word; nothing was saved. Write something "
                f"new{': a public function that acts and uses it' if nothing_public else ''}.")
    known = sess.primitives | set(candidate)
    unbound = {f.name: names for f in parsed if (names := _unbound(f.source, known))} if sess.require_defined else {}
    if unbound:
        which = "; ".join(f"{name} uses {', '.join(names)}" for name, names in unbound.items())
        # the inducers read `observation` (or `step`) as if the agent's view were a global
        values = sorted({n for f in parsed for n in unbound.get(f.name, ()) if n not in _called(f.source)})
        seen = (f" {', '.join(values)}: read as values, bound nowhere; what the agent sees is the text each action "
                f"returns (seen = {sess.observes}()), and what a skill is told comes in its arguments."
                if values and sess.observes else "")
        return (f"Error: {which}, defined nowhere a skill runs (not a primitive, a library function or a Python "
                f"builtin): every call would raise NameError. Write those functions first (or in the same block), or "
                f"act with the primitives.{seen} Nothing was saved.")
    problem = (smoke_check(candidate, [f.name for f in parsed], bench, task_ids, sess.policy) if replay
               else load_check(candidate, sess.policy))
    if problem:
        return f"Error: not saved, the check failed: {problem}"
    sess.functions = candidate
    sess.writes_ok += 1
    note = f" (ignored top-level statements: {'; '.join(other)[:200]}; put imports inside functions)" if other else ""
    if moved:
        where = ", ".join(f"{'; '.join(texts)} into {name}" for name, texts in moved.items())
        note += f" (top-level imports copied into the functions using them: {where})"
    if idle:
        note += (f" ({', '.join(idle)} reach(es) no primitive action, directly or through library functions (an "
                 f"action's name returned as text does nothing){how}: "
                 f"kept private, out of the agent's list; a public function that acts (calls "
                 f"{', '.join(sorted(sess.primitives)[:3])}, ...) can use it)")
    if unread := {f.name: p for f in parsed if candidate[f.name].public and (p := _unread_parameters(f.source))}:
        which = "; ".join(f"{name} never reads {', '.join(p)}" for name, p in unread.items())
        note += (f" ({which}: the agent fills every argument and expects the function to act on it; use it, e.g. "
                 f"act until the observation names the target, or drop it)")
    return f"Saved {written}{note}{dropped}. Library: {', '.join(sess.functions)}."


def delete_function(sess: Session, name: str) -> str:
    if name not in sess.functions:
        return f"Error: no function {name!r}; the library has: {', '.join(sess.functions) or 'nothing'}."
    users = [f.name for f in sess.functions.values() if name in f.callees and f.name != name]
    if users:
        return f"Error: {name} is still called by {', '.join(users)}; change those first."
    del sess.functions[name]
    return f"Deleted {name}. Library: {', '.join(sess.functions) or '(empty)'}."


def final_functions(sess: Session) -> dict[str, SkillFunction]:
    """Every write was checked; still, keep only what parses and loads together (belt and braces)."""
    funcs = dict(sess.functions)
    while funcs:
        if not load_check(funcs, sess.policy):
            return funcs
        bad = [n for n, f in funcs.items() if _does_not_compile(f.source)] or [list(funcs)[-1]]
        del funcs[bad[0]]
    return funcs


def _parses(src: str) -> bool:
    try:
        parse_untrusted(src)
        return True
    except SyntaxError:
        return False


def _does_not_compile(src: str) -> bool:
    try:
        compile(parse_untrusted(src), "<skill>", "exec")
        return False
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return True
