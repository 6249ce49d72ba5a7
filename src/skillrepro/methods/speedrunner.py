"""SpeedRunner: a coding agent edits the skill library between rollout batches.

The inducer is an LLM with tools: `execute_code` (Python in the sandbox, with the run's history in a
read-only DuckDB), `read_library`, `write_function`, `delete_function`, `finish`. It works on a copy of
library v{k}; every write is checked before it is kept: it parses and the library loads in the sandbox.
The online protocol forbids replay (appendix E, section 2: a finished rollout's task is never re-run), so
no check steps an environment; `replay_check: true` re-runs a new zero-argument function on a fresh copy of
a past training task, a deviation kept as an explicit option (recorded in the manifest, off by default).
Whatever the model manages, the result is a valid v{k+1}: v{k} plus the writes that passed.

Small CPU models rarely produce native tool calls, so replies are read with a lenient text protocol
("Action: write_function(public=True)" plus a ```python block; a bare `def` or code block is understood
too). When `llm.tool_calling` is native the protocol, the examples and the conversation are native: each
call stays in the history as the assistant's tool call with its answer as the tool's message; a reply that
writes its call as text instead (the JSON of a call, or the text protocol) is read as that call.
Under `constrained` each reply is decoded under a JSON schema of the tools (as the actor's are), so a
`write_function` call is always one well-formed call with its code as a string, and the last request of
a session that has written nothing may call `write_function` only.

Ablations (method options): prompt asi_style (the ASI-like prompt file), access all_public (every
function public), interpreter false (no execute_code; the recent trajectories are put in the context).

The notebook defines the working library's functions (after every write), with each primitive raising
there, so a cell can try a function's parsing on recorded observations. `inducer.example_steps` (a
deviation, 0 in the paper) puts one recorded episode's first steps in the first message. The protocol shows
a worked function (a deviation too: the paper's protocol shows none); the `example_file` option replaces the
built-in one, a loop over one primitive, with the functions of a file (src/skillrepro/resources/examples/).

Records: the session's LLM calls go to <run>/induce/v{k+1}/llm_calls.parquet (role "inducer") and every
tool call, its input and its output to transcript.jsonl beside it.
"""
from __future__ import annotations

import ast
import builtins
import json
import re
import symtable
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from skillrepro.agent import call_schema
from skillrepro.methods import InduceContext, register
from skillrepro.config import InducerLimits
from skillrepro.methods.common import (CODE_FENCE, PREFIX_TRIES, SMOKE_LIMITS, load_check,
                                      longest_parsing_prefix, read_traces, show_traces, Trace)
from skillrepro.skills.library import MAX_SOURCE_CHARS, Library, SkillFunction, parse_functions, parse_untrusted
from skillrepro.skills.sandbox import SandboxLimits, SandboxPolicy, SandboxSession
from skillrepro.store import TABLES, LLMCall, schema, write_records, write_text
from skillrepro.benchmarks import load_benchmark, primitive_returns
from skillrepro.llm.client import LLMRequestError

PROMPTS = Path(__file__).resolve().parents[1] / "prompts"
HISTORY_TABLES = ("episodes", "steps", "llm_calls", "skill_calls")
# Ends at "def", not "def ": tokenizers fold the space into the name's token, so a trailing space asks the model
# to start a word mid-token (SmolLM2 then wrote "def  # ..." or "def \nwrite_function(" on 3 of 6 seeds).
LAST_CHANCE_PREFILL = "Action: write_function(public=True)\n```python\ndef"


def interpreter_limits(limits: InducerLimits) -> SandboxLimits:
    """The interpreter's sandbox. It loads the run's history into DuckDB when it starts: on a busy laptop that
    can take more than a skill worker's 30 s. Its output capture is what the inducer is shown of a result."""
    return SandboxLimits(call_wall_s=60, call_cpu_s=30, memory_bytes=4 << 30, output_chars=limits.tool_output_chars,
                         start_wall_s=180, scratch_bytes=512 << 20)

HELPER_API = """In execute_code these names are predefined (a notebook: your variables persist between calls):
  sql(query, limit=50) -> list of row dicts     show(query, limit=20)   prints a compact table
  library_source(version) -> str                library_versions() -> list[int]
  db: the DuckDB connection (read-only data; external files and network are switched off)
  every function of the library as it is now (the primitives raise there: no environment runs in the notebook)
Tables: {tables}
Files outside a private scratch folder cannot be written; there is no network."""

# execute_code's predefined names (HELPER_API), which a skill cannot reach
NOTEBOOK_NAMES = frozenset({"sql", "show", "db", "library_source", "library_versions"})

TOOL_DOCS = {
    "execute_code": "execute_code: run the Python code block and see what it prints (and the value of its last line).",
    "read_library": "read_library(): show the current library source.",
    "write_function": "write_function(public=True|False): save the function(s) in the code block; a function "
                      "with the same name is replaced. Public functions are offered to the agent.",
    "delete_function": "delete_function(\"name\"): remove a function.",
    "finish": "finish(\"summary\"): end the session; the library as it is now becomes the next version.",
}

# The same tools described by their arguments, for the native protocol and the tools' schemas
NATIVE_DOCS = {
    "execute_code": "execute_code(code): run Python code and see what it prints (and the value of its last line).",
    "read_library": "read_library(): show the current library source.",
    "write_function": "write_function(source, public): save the function(s) in `source`; a function with the same "
                      "name is replaced. Public functions are offered to the agent.",
    "delete_function": "delete_function(name): remove a function.",
    "finish": "finish(summary): end the session; the library as it is now becomes the next version.",
}


@dataclass(frozen=True)
class Options:
    prompt: Literal["default", "asi_style"] = "default"  # inducer prompt file prompts/inducer_{prompt}.txt
    access: Literal["split", "all_public"] = "split"  # all_public: every function is shown to the actor
    interpreter: bool = True  # false: no execute_code; recent trajectories go into the context instead
    inducer_prompt_file: str | None = None  # replaces the prompt file
    replay_check: bool = False  # deviation: run new functions on a past training task (not online)
    # deviation: the functions of this Python file (or files, in order) are the protocol's worked example of a
    # skill, in place of the built-in loop over one primitive (null)
    example_file: str | list[str] | None = None

    def check(self) -> None:
        if self.inducer_prompt_file and not Path(self.inducer_prompt_file).is_file():
            raise ValueError(f"inducer_prompt_file: {self.inducer_prompt_file} does not exist")
        if self.example_file:
            example_source(self.example_file)


def example_source(paths: str | list[str]) -> str:
    """The functions of the `example_file`(s), as the protocol shows them (a ValueError names what is wrong)."""
    functions = []
    for path in [paths] if isinstance(paths, str) else paths:
        if not Path(path).is_file():
            raise ValueError(f"example_file: {path} does not exist")
        found = parse_functions(Path(path).read_text())
        if not found:
            raise ValueError(f"example_file: {path} defines no function")
        functions += found
    return Library(0, tuple(functions)).source.strip()


@dataclass
class Action:
    name: str
    code: str = ""
    public: bool | None = None
    target: str = ""
    problem: str = ""


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


# ------------------------------------------------------------------------------------------ parsing
TEXT_HINT = "Reply with 'Action: <tool>' and, for execute_code or write_function, one ```python block."
_ACTION = re.compile(r"action\s*:\s*`*\s*([A-Za-z_]+)\s*(\(([^\n]*)\))?", re.IGNORECASE)


def _bare_code(text: str) -> str:
    """Code written without a fence: from the first `def`/`import` line to the longest prefix that parses."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if re.match(r"\s*(def |import |from \w+ import )", ln)), None)
    if start is None:
        return ""
    body = lines[start:]
    return longest_parsing_prefix(body) or "\n".join(body)


def parse_action(text: str, interpreter: bool) -> Action:
    """Read one tool call from a text reply, leniently (see the module docstring)."""
    m = _ACTION.search(text)
    fence = CODE_FENCE.search(text)
    code = fence.group(1).strip("\n") if fence else _bare_code(text)
    if m:
        name, argtext = m.group(1).lower(), m.group(3) or ""
        if name in ("execute_code", "execute", "run", "python"):
            name = "execute_code"
        if name == "write_function":
            pub = re.search(r"public\s*=\s*(true|false)", argtext, re.IGNORECASE)
            return Action("write_function", code, None if not pub else pub.group(1).lower() == "true")
        if name == "delete_function":
            target = re.search(r"[\"']?([A-Za-z_][A-Za-z0-9_]*)", argtext)
            return Action("delete_function", target=target.group(1) if target else "")
        if name in ("read_library", "finish"):
            return Action(name)
        if name == "execute_code":
            return Action(name, code)
        return Action(name, code, problem=f"unknown tool {m.group(1)!r}. {TEXT_HINT}")
    if code and re.search(r"^\s*def \w+\s*\(", code, re.MULTILINE):
        return Action("write_function", code)
    if code and interpreter:
        return Action("execute_code", code)
    if re.search(r"\bfinish\b", text, re.IGNORECASE):
        return Action("finish")
    return Action("", problem=f"no tool call found. {TEXT_HINT}")


NATIVE_HINT = ("Call one of the offered tools through the tool interface (write_function with the arguments source "
               "and public, execute_code with code), not as text.")


def text_call(text: str, interpreter: bool) -> Action:
    """Read a native-mode reply that wrote its call as text instead of making it: the JSON of a call
    ({"name": ..., "arguments": {...}}, as the history's calls look, in a fence or not), else the text protocol.
    A reply with neither is answered with how to call."""
    body = text.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", body, re.DOTALL)
    try:
        call = json.loads(fenced.group(1) if fenced else body)
    except ValueError:
        call = None
    if isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("arguments", {}), dict):
        return native_action(call["name"], call.get("arguments") or {})
    action = parse_action(text, interpreter)
    return replace(action, problem=f"no tool call found. {NATIVE_HINT}") if action.name == "" else action


def native_action(name: str, args: dict[str, Any]) -> Action:
    if "__unparsed__" in args:
        return Action(name, problem=f"could not read the arguments {args['__unparsed__']!r}; nothing was done.")
    pub = args.get("public")
    return Action(name, str(args.get("code") or args.get("source") or ""),
                  None if pub is None else bool(pub), str(args.get("name") or ""))


def reply_schema(tools: list[dict]) -> dict:
    """The JSON schema a constrained inducer reply is decoded under: one call of one of `tools` (their
    native schemas), `{"name": ..., "arguments": {...}}`, the shape the actor's constrained replies take."""
    return {"anyOf": [call_schema(t["function"]) for t in tools]}


_SOURCE_PREFIX = re.compile(r'"(?:source|code)"\s*:\s*"((?:[^"\\]|\\.)*)')


def cut_inside_code(text: str, constrained: bool) -> bool:
    """Whether a reply that stopped at its token cap stopped inside its code: an unclosed ```python block (or code
    with no block at all), or a constrained reply that is not complete JSON."""
    if constrained:
        try:
            json.loads(text)
            return False
        except ValueError:
            return True
    return "```" not in text or text.count("```") % 2 == 1


def drop_cut_function(code: str) -> tuple[str, str]:
    """The code of a write cut at the reply's token cap, without its last function, and that function's name ("" if
    the code does not parse: write_function then keeps the complete functions before the cut). What is left of a
    cut function can parse (`a, b = f(0), g` is valid Python) and would be saved half written."""
    try:
        tree = parse_untrusted(code)
    except SyntaxError:
        return code, ""
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not defs:
        return code, ""
    last = defs[-1]
    start = min([last.lineno, *(d.lineno for d in last.decorator_list)]) - 1
    return "\n".join(code.splitlines()[:start]).rstrip(), last.name


def json_action(text: str) -> Action:
    """Read a constrained reply. One cut off by the token limit is not valid JSON: its code string so far is
    kept (write_function then saves the complete functions in it, as for a text reply)."""
    try:
        call = json.loads(text)
        return native_action(str(call["name"]), call.get("arguments") or {})
    except (ValueError, KeyError, TypeError):
        name = re.search(r'"name"\s*:\s*"(\w+)"', text)
        code = _SOURCE_PREFIX.search(text)
        if name and code:
            partial = code.group(1).removesuffix("\\")
            try:
                return Action(name.group(1), json.loads(f'"{partial}"'),
                              True if name.group(1) == "write_function" else None)
            except ValueError:
                pass
        return Action("", problem="the reply is not one complete JSON tool call (cut off by the reply's token "
                                  "limit?); nothing was done. Write shorter code.")


def tool_schemas(interpreter: bool) -> list[dict]:
    def fn(name, desc, props, required):
        return {"type": "function", "function": {"name": name, "description": desc, "parameters": {
            "type": "object", "properties": props, "required": required}}}

    out = [
        fn("read_library", NATIVE_DOCS["read_library"], {}, []),
        fn("write_function", NATIVE_DOCS["write_function"], {"source": {"type": "string"}, "public": {"type": "boolean"}},
           ["source", "public"]),
        fn("delete_function", NATIVE_DOCS["delete_function"], {"name": {"type": "string"}}, ["name"]),
        fn("finish", NATIVE_DOCS["finish"], {"summary": {"type": "string"}}, []),
    ]
    if interpreter:
        out.insert(0, fn("execute_code", NATIVE_DOCS["execute_code"], {"code": {"type": "string"}}, ["code"]))
    return out


# ------------------------------------------------------------------------------------------ history
def history_files(history_dirs: tuple[Path, ...]) -> dict[str, list[str]]:
    return {t: [str(d / f"{t}.parquet") for d in history_dirs if (d / f"{t}.parquet").is_file()] for t in HISTORY_TABLES}


def _history_facts(files: dict[str, list[str]]) -> list[dict]:
    """Per-cycle success summary, read in the parent with DuckDB."""
    import duckdb

    if not files["episodes"]:
        return []
    con = duckdb.connect()
    listing = ", ".join("'" + f.replace("'", "''") + "'" for f in files["episodes"])
    con.execute(f"CREATE VIEW e AS SELECT * FROM read_parquet([{listing}], union_by_name=true)")
    rows = con.execute("SELECT cycle, library_version, count(*) n, avg(success::INT) success_rate, "
                       "avg(progression) mean_progression, avg(n_steps) mean_steps, "
                       "avg(completion_tokens) mean_output_tokens "
                       "FROM e WHERE split = 'train' GROUP BY ALL ORDER BY cycle").fetchall()
    cols = ["cycle", "library_version", "episodes", "success_rate", "mean_progression", "mean_steps",
            "mean_output_tokens"]
    return [dict(zip(cols, r)) for r in rows]


def _example_episode(traces: list[Trace], n_steps: int) -> str:
    """One recorded training episode as the agent saw it, a failed one where there is one (the latest): its
    opening observation and its first `n_steps` steps, each action with what it returned (option
    inducer.example_steps; the paper shows none and the inducer reads episodes with its interpreter)."""
    if n_steps <= 0 or not traces:
        return ""
    t = min(traces, key=lambda t: (t.success, -t.cycle, t.episode_id))
    lines = [f"One recorded episode (episode_id {t.episode_id!r}, task {t.task_id}, "
             f"{'solved' if t.success else 'failed'}), as the agent saw it "
             f"(the steps table has every one):", f"Opening observation:\n{t.opening}"]
    for step, (action, args, observation) in enumerate(t.steps[:n_steps]):
        lines.append(f"Step {step}: {action}({', '.join(map(repr, args))}) returned:\n{observation}")
    return "\n".join(lines)


def _notebook_library(sess: Session) -> str:
    """Code that defines the working library in the interpreter, so a cell can try its functions (their
    parsing, on recorded observations). There is no environment there: each primitive raises, saying so."""
    why = ("steps the environment, and execute_code has none (a finished task is never re-run); try the "
           "parts of a function that read observations on recorded ones instead")
    stubs = "\n".join(f"def {p}(*args, **kwargs):\n    raise RuntimeError({(p + '() ' + why)!r})"
                      for p in sorted(sess.primitives))
    return stubs + "\n\n" + Library(0, tuple(sess.functions.values())).source


# ------------------------------------------------------------------------------------------ tools
def _observing(primitives):
    """The argument-less primitive that shows the agent's view: D.2's read, get_current_observation(), where the
    benchmark has it (Crafter, BabyAI's option current_observation), else the first that returns text (None if
    the benchmark has none)."""
    free = [p for p in primitives if p.signature.startswith(f"{p.name}()") and p.returns == "str"]
    return next((p for p in free if p.name == "get_current_observation"), free[0] if free else None)


def _example_loop(primitives) -> str:
    """The built-in worked function: an argument-less primitive that acts, repeated until the text the agent
    then sees mentions `text`. Where that primitive returns nothing (Crafter's actions, under D.2) the text is
    read after each step with the observing primitive, so the example acts and does not loop over a read
    ('' if the benchmark has neither)."""
    act = next((p for p in primitives if p.signature.startswith(f"{p.name}()") and p.advances), None)
    read = act if act is not None and act.returns == "str" else _observing(primitives)
    if act is None or read is None:
        return ""
    if read is act:
        doc, step = f"Call {act.name}() until the text it returns", f"        seen = {act.name}()\n"
    else:
        doc, step = (f"Call {act.name}() until {read.name}() after it",
                     f"        {act.name}()\n        seen = {read.name}()\n")
    return (f'def {act.name}_until(text, max_steps=4):\n    """{doc} mentions `text`; return that text."""\n'
            f'    seen = ""\n    for _ in range(max_steps):\n{step}        if text in seen:\n            break\n'
            f'    return seen')


def _examples(interpreter: bool, primitives, protocol: str, function: str = "") -> str:
    """The protocol's worked examples, in `protocol`'s form (llm.tool_calling: text, constrained, native). With
    the interpreter, a query and then a function: shown only the query, the 1.5B inducer wrote skills that act
    through the notebook (db.execute_query("pick_up()")). The query selects episode_id: shown task_id alone, it
    looked up steps by a task id (`episode_id = 116739`). The function is `function` (option example_file)
    where given, else `_example_loop`'s, built from this benchmark's primitives so that it names no action the
    environment lacks."""
    shown = [("I want to see how often the agent succeeded.", "execute_code",
              'show("SELECT episode_id, task_id, success, n_steps FROM episodes")')] if interpreter else []
    if function:
        shown.append(("A function can read where things are in the text the primitives return and act on it.",
                      "write_function(public=True)", function))
    elif loop := _example_loop(primitives):
        shown.append(("A function can repeat an action until what it returns says the sub-goal is reached.",
                      "write_function(public=True)", loop))
    blocks = []
    for thought, tool, code in shown:
        name = tool.split("(")[0]
        args = {"code": code} if name == "execute_code" else {"source": code, "public": True}
        if protocol == "constrained":
            blocks.append(json.dumps({"name": name, "arguments": args}))
        elif protocol == "native":
            blocks.append(f"{thought} A call of {name} with the arguments {json.dumps(args)}")
        else:
            blocks.append(f"Thought: {thought}\nAction: {tool}\n```python\n{code}\n```")
    return "".join(f"Example:\n{b}\n" for b in blocks).rstrip("\n")


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


def render_exec(out, max_chars: int) -> str:
    parts = []
    if out.output:
        more = out.output_total - len(out.output)
        parts.append(out.output + (f"\n[output truncated: {more} more characters]" if more > 0 else ""))
    if out.ret is not None:
        parts.append(out.ret)
    if out.exception:
        parts.append(f"Error:\n{out.exception}")
    if out.killed:
        parts.append(f"Error: stopped, {out.killed}.")
    return ("\n".join(parts) or "(no output)")[:max_chars]


# ------------------------------------------------------------------------------------------ the session
def _chars(message: dict) -> int:
    return len(message.get("content") or "") + sum(len(c["function"]["arguments"]) for c in message.get("tool_calls", ()))


def _trim(messages: list[dict], budget_chars: int) -> list[dict]:
    """System and task messages always; then as many of the latest turns as fit."""
    head, tail = messages[:2], messages[2:]
    size = sum(map(_chars, head))
    kept: list[dict] = []
    for m in reversed(tail):
        size += _chars(m)
        if size > budget_chars:
            break
        kept.insert(0, m)
    if kept and kept[0]["role"] != "assistant" and len(kept) < len(tail):
        kept = kept[1:]  # start on a full assistant/user pair
    return head + kept


def induce(ctx: InduceContext, client) -> Library:
    """Run one inducer session on library v{k} and return v{k+1} (not yet written)."""
    opts: Options = ctx.options
    interpreter = opts.interpreter
    all_public = opts.access == "all_public"
    style = opts.prompt
    prompt_file = Path(opts.inducer_prompt_file or PROMPTS / f"inducer_{style}.txt")
    if not prompt_file.is_file():
        raise FileNotFoundError(f"method {ctx.method.variant}: inducer prompt file {prompt_file} does not exist")
    bench = load_benchmark(ctx.bench)
    files = history_files(ctx.history_dirs)
    summary = _history_facts(files)
    # every past episode from the records (the online protocol never re-runs a task, not even to reset it)
    traces = read_traces(ctx.history_dirs)
    task_ids = sorted({t.task_id for t in traces})
    prims = bench.primitives()
    observing = _observing(prims)
    sess = Session({f.name: f for f in ctx.library.functions}, {p.name for p in prims}, all_public, ctx.sandbox,
                   require_action=ctx.limits.require_action, require_defined=ctx.limits.require_defined,
                   observes=observing.name if observing else "")
    session_id = f"{ctx.run_id}/induce/v{ctx.library.version + 1}"
    record_dir = ctx.record_dir

    tools = [t for t in TOOL_DOCS if interpreter or t != "execute_code"]
    access_rule = ("Every function you write is offered to the agent." if all_public else
                   "Make the few main functions public (the agent sees them) and helpers private (name them "
                   "with a leading underscore and write them with public=False); private functions stay callable "
                   "from other functions but are hidden from the agent.")
    native, constrained = ctx.llm.tool_calling == "native", ctx.llm.tool_calling == "constrained"
    form = {"native": "native", "constrained": "json"}.get(ctx.llm.tool_calling, "text")
    protocol = (PROMPTS / f"inducer_tools_{form}.txt").read_text().format(
        tool_list="\n".join(f"- {NATIVE_DOCS[t] if native else TOOL_DOCS[t]}" for t in tools),
        examples=_examples(interpreter, prims, ctx.llm.tool_calling,
                           example_source(opts.example_file) if opts.example_file else ""))
    system = prompt_file.read_text().format(
        environment=bench.describe(),
        primitives="\n".join(f"- {p.signature}: {p.doc}" for p in prims),
        returns=primitive_returns(prims), access_rule=access_rule, tools=protocol)
    limits = ctx.limits
    max_tokens, ctx_chars = limits.reply_tokens(ctx.llm), limits.history_chars(ctx.llm)
    facts = "\n".join(json.dumps(r, default=str) for r in summary) or "(no episodes yet)"
    task_msg = [f"Training so far (per cycle):\n{facts}",
                f"Current library (version {ctx.library.version}):\n{sess.library_text()[:limits.library_chars]}"]
    sandbox, shown = None, None
    example = _example_episode(traces, limits.example_steps)
    if example:
        task_msg.append(example)
    if interpreter:
        empty = {t: [(f.name, str(f.type)) for f in schema(cls)] for t, cls in _tables().items()}
        tables = ", ".join(f"{t}({', '.join(c for c, _ in empty[t])})" for t in HISTORY_TABLES)
        tables += ", openings(task_id, opening: the task's first observation, with its mission)"
        task_msg.append(HELPER_API.format(tables=tables))
        sandbox = SandboxSession(
            site_packages=True, limits=interpreter_limits(limits), policy=ctx.sandbox,
            db={"tables": files, "empty_schemas": {t: _duck_types(c) for t, c in empty.items()},
                # each training task's first observation, from its episode's first actor prompt
                "inline": {"openings": [{"task_id": t, "opening": o} for t, o in
                                        {t.task_id: t.opening for t in traces}.items()]},
                "library_versions": {str(v): str(ctx.library_root / f"v{v}" / "skills.py")
                                     for v in range(ctx.library.version + 1)}})
        # The interpreter is this method's defining tool: one that cannot start, or lacks a required layer,
        # fails the sleep phase (SandboxError) instead of letting it write a library without analysis.
        try:
            sandbox.start()
        except BaseException:
            sandbox.close()
            raise
        sandbox.exec_code(_notebook_library(sess))
    else:
        # the interpreter-off ablation reads what every comparison method reads, under the same budget
        shown = show_traces(traces, ctx.trajectory_tokens)
        task_msg.append(f"Recent episodes:\n{shown.text}")
    task_msg.append("Improve the library now. One tool call per reply.")
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(task_msg)[:ctx_chars // 2]}]

    schemas = tool_schemas(interpreter)
    constrain = lambda allowed: {"response_format": {"type": "json_schema", "json_schema": {  # noqa: E731
        "name": "inducer_action", "schema": reply_schema(allowed)}}} if constrained else None
    records: list[LLMCall] = []
    try:
        for req in range(ctx.request_budget):
            left = ctx.request_budget - req
            prefill, allowed = "", schemas
            if left <= limits.nudge_requests and sess.writes_ok == 0:
                # A reminder: a session that never writes leaves the library unchanged. In the text protocol
                # the reply is also started for the model (servers continue a trailing assistant message),
                # which is what gets a 135M model to write a function at all.
                when = "This is your last request" if left == 1 else f"You have {left} requests left"
                how = ("Call write_function with public true and the source of" if native else
                       "Reply with Action: write_function(public=True) and one ```python block containing")
                messages.append({"role": "user", "content": f"{when} and you have not saved a function yet. {how} "
                                 "a complete function that calls the primitive actions."})
                # constrained: the reply can only be a write_function call
                allowed = [t for t in schemas if t["function"]["name"] == "write_function"]
                prefill = "" if native or constrained else LAST_CHANCE_PREFILL
            sent = _trim(messages, ctx_chars) + ([{"role": "assistant", "content": prefill}] if prefill else [])
            try:
                # Small models go on to invent the tool's answer: stop them there.
                reply = client.chat(sent, role="inducer", session_id=session_id, tools=schemas if native else None,
                                    max_tokens=max_tokens, stop=None if native or constrained else
                                    ["\nObservation:", "\nThought:"], extra_body=constrain(allowed))
            except LLMRequestError as e:  # the context overflowed even after trimming
                sess.transcript.append({"request": req, "error": str(e)})
                break
            records.extend(reply.records)
            text = reply.text
            tc = reply.tool_calls[0] if reply.tool_calls else None
            if tc is not None:
                action = native_action(tc.name, tc.arguments)
            elif constrained:
                action = json_action(text)
            elif native:  # a call written out as text instead of made: read it (see the module docstring)
                action = text_call(text, interpreter)
            else:
                # Servers differ: some return the continuation only, some a fresh reply (or prefix included).
                # The conversation keeps the whole reply, so that a later request sees what was written.
                if prefill and not text.lstrip().startswith(("Action", "```", "def ", "Thought")):
                    text = prefill + text
                action = parse_action(text, interpreter)
            t0 = time.time()
            first = sess.asked.get((action.name, action.code)) if limits.repeat_notice else None
            if first is not None and action.name in ("execute_code", "read_library") and not action.problem:
                observation = (f"The same call as request {first + 1}, and nothing has changed since: its answer is "
                               "above. Do something new: query other columns or episodes, or write a function.")
            elif (reply.finish_reason == "length" and action.name == "write_function" and not reply.tool_calls
                  and cut_inside_code(text, constrained)
                  and (cut := drop_cut_function(action.code))[1]):
                # the reply ended inside its last function: never save half of it, even where the rest parses
                code, name = cut
                why = (f"the reply stopped at its {max_tokens}-token limit inside {name}, so {name} is incomplete and "
                       "was not saved; write a shorter function (a loop over what the primitives return, not one "
                       "branch per step)")
                observation = (_apply(replace(action, code=code), sess, sandbox, interpreter, bench, task_ids,
                                      opts.replay_check, limits) + f" ({why})" if code.strip()
                               else f"Error: {why}. Nothing was saved.")
            else:
                observation = _apply(action, sess, sandbox, interpreter, bench, task_ids, opts.replay_check, limits)
                if reply.finish_reason == "length" and observation.startswith("Error: the code does not parse"):
                    observation += (f" The reply stopped at its {max_tokens}-token limit in the middle of the code: "
                                    "write a shorter function (a loop over what the primitives return, not one "
                                    "branch per step).")
                if action.name in ("write_function", "delete_function") and observation.startswith(("Saved", "Deleted")):
                    sess.asked.clear()  # the library changed: a read or a cell may now answer otherwise
                sess.asked.setdefault((action.name, action.code), req)
            sess.transcript.append({"request": req, "prefill": prefill, "reply": reply.text, "tool": action.name, "code": action.code,
                                    "public": action.public, "target": action.target, "observation": observation,
                                    "tool_s": round(time.time() - t0, 3), "prompt_tokens": reply.record.prompt_tokens,
                                    "completion_tokens": reply.record.completion_tokens})
            if tc is not None:  # the call stays in the conversation as made, answered by the tool's message
                messages.append({"role": "assistant", "content": text, "tool_calls": [
                    {"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": json.dumps(tc.arguments)}}]})
            else:
                messages.append({"role": "assistant", "content": text or json.dumps(
                    {"name": action.name, "arguments": {"code": action.code}})})
            if sess.finished:
                break
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": observation} if tc is not None
                            else {"role": "user", "content": f"Observation:\n{observation}"})
    finally:
        if sandbox is not None:
            sandbox.close()
        write_records(record_dir / "llm_calls.parquet", records, LLMCall)
        write_text(record_dir / "transcript.jsonl", "".join(json.dumps(t, default=str) + "\n" for t in sess.transcript))

    final = _final_functions(sess)
    return Library(ctx.library.version + 1, tuple(final.values()), ctx.library.notes, {
        "method": "speedrunner", "variant": ctx.method.variant, "cycle": ctx.cycle, "session_id": session_id,
        "requests": len(records), "writes_accepted": sess.writes_ok, "finished": sess.finished,
        "prompt": style, "access": "all_public" if all_public else "split", "interpreter": interpreter,
        "replay_check": opts.replay_check, "trajectory_tokens": ctx.trajectory_tokens, "limits": asdict(limits),
        "trajectory_tokens_shown": shown.tokens if shown else None, **(shown.record() if shown else {})})


def _apply(action: Action, sess: Session, sandbox, interpreter: bool, bench, task_ids, replay: bool,
           limits: InducerLimits) -> str:
    if action.problem:
        return f"Error: {action.problem}"
    if action.name == "execute_code":
        if not interpreter:
            return "Error: execute_code is not available in this session."
        if not action.code.strip():
            return "Error: no code block found after Action: execute_code."
        return render_exec(sandbox.exec_code(action.code), limits.tool_output_chars)
    if action.name == "read_library":
        return sess.library_text()[:limits.read_library_chars]
    if action.name in ("write_function", "delete_function"):
        deleting = action.name == "delete_function"
        out = (delete_function(sess, action.target) if deleting
               else write_function(sess, action.code, action.public, bench, task_ids, replay))
        if sandbox is not None and not out.startswith("Error"):  # the notebook holds what the library now holds
            sandbox.exec_code((f"globals().pop({action.target!r}, None)\n" if deleting else "") + _notebook_library(sess))
        return out
    if action.name == "finish":
        sess.finished = True
        return "Finished."
    return f"Error: unknown tool {action.name!r}."


def _final_functions(sess: Session) -> dict[str, SkillFunction]:
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


def _tables() -> dict[str, type]:
    return {t: TABLES[t] for t in HISTORY_TABLES}


_DUCK = {"string": "VARCHAR", "int64": "BIGINT", "double": "DOUBLE", "bool": "BOOLEAN", "list<item: int64>": "BIGINT[]"}


def _duck_types(cols: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(c, _DUCK.get(t, "VARCHAR")) for c, t in cols]


register("speedrunner", Options, induce)
