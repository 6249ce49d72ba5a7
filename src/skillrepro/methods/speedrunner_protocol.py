"""SpeedRunner's tool protocol: the tools the inducer is offered (their docs and native schemas), how a reply is
read as one tool call, and the worked examples its first message shows.

Small CPU models rarely produce native tool calls, so replies are read with a lenient text protocol
("Action: write_function(public=True)" plus a ```python block; a bare `def` or code block is understood
too). When `llm.tool_calling` is native the protocol, the examples and the conversation are native: each
call stays in the history as the assistant's tool call with its answer as the tool's message; a reply that
writes its call as text instead (the JSON of a call, or the text protocol) is read as that call.
Under `constrained` each reply is decoded under a JSON schema of the tools (as the actor's are), so a
`write_function` call is always one well-formed call with its code as a string.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from skillrepro.agent import call_schema
from skillrepro.methods.common import CODE_FENCE, longest_parsing_prefix
from skillrepro.skills.library import Library, parse_functions, parse_untrusted

# Ends at "def", not "def ": tokenizers fold the space into the name's token, so a trailing space asks the model
# to start a word mid-token (SmolLM2 then wrote "def  # ..." or "def \nwrite_function(" on 3 of 6 seeds).
LAST_CHANCE_PREFILL = "Action: write_function(public=True)\n```python\ndef"

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
    "read_library": "read_library(offset=0): show the current library source from character `offset` on, as much as "
                    "one answer holds (a cut answer names the offset the rest starts at).",
    "write_function": "write_function(public=True|False): save the function(s) in the code block; a function "
                      "with the same name is replaced. Public functions are offered to the agent.",
    "delete_function": "delete_function(\"name\"): remove a function.",
    "finish": "finish(\"summary\"): end the session; the library as it is now becomes the next version.",
}

# The same tools described by their arguments, for the native protocol and the tools' schemas
NATIVE_DOCS = {
    "execute_code": "execute_code(code): run Python code and see what it prints (and the value of its last line).",
    "read_library": "read_library(offset): show the current library source from character `offset` on (default 0), "
                    "as much as one answer holds (a cut answer names the offset the rest starts at).",
    "write_function": "write_function(source, public): save the function(s) in `source`; a function with the same "
                      "name is replaced. Public functions are offered to the agent.",
    "delete_function": "delete_function(name): remove a function.",
    "finish": "finish(summary): end the session; the library as it is now becomes the next version.",
}


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
    offset: int = 0  # read_library's: the character the answer starts at


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
        if name == "read_library":
            offset = re.search(r"(?:offset\s*=\s*)?(-?\d+)", argtext)
            return Action(name, offset=int(offset.group(1)) if offset else 0)
        if name == "finish":
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
    offset = _offset(args.get("offset")) if name == "read_library" else 0
    if offset is None:
        return Action(name, problem=f"offset must be a whole number of characters, not {args['offset']!r}; nothing "
                                    "was done.")
    return Action(name, str(args.get("code") or args.get("source") or ""),
                  None if pub is None else bool(pub), str(args.get("name") or ""), offset=offset)


def _offset(value: Any) -> int | None:
    """read_library's offset argument as a number of characters (absent: 0), or None if it is not one. A model may
    quote its number, or a JSON decoder make it a float."""
    if value is None:
        return 0
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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
        fn("read_library", NATIVE_DOCS["read_library"], {"offset": {"type": "integer"}}, []),
        fn("write_function", NATIVE_DOCS["write_function"], {"source": {"type": "string"}, "public": {"type": "boolean"}},
           ["source", "public"]),
        fn("delete_function", NATIVE_DOCS["delete_function"], {"name": {"type": "string"}}, ["name"]),
        fn("finish", NATIVE_DOCS["finish"], {"summary": {"type": "string"}}, []),
    ]
    if interpreter:
        out.insert(0, fn("execute_code", NATIVE_DOCS["execute_code"], {"code": {"type": "string"}}, ["code"]))
    return out


def observing(primitives):
    """The argument-less primitive that shows the agent's view: D.2's read, get_current_observation(), where the
    benchmark has it (Crafter, BabyAI's option current_observation), else the first that returns text (None if
    the benchmark has none)."""
    free = [p for p in primitives if p.signature.startswith(f"{p.name}()") and p.returns == "str"]
    return next((p for p in free if p.name == "get_current_observation"), free[0] if free else None)


def example_loop(primitives) -> str:
    """The built-in worked function: an argument-less primitive that acts, repeated until the text the agent
    then sees mentions `text`. Where that primitive returns nothing (Crafter's actions, under D.2) the text is
    read after each step with the observing primitive, so the example acts and does not loop over a read
    ('' if the benchmark has neither)."""
    act = next((p for p in primitives if p.signature.startswith(f"{p.name}()") and p.advances), None)
    read = act if act is not None and act.returns == "str" else observing(primitives)
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


def examples(interpreter: bool, primitives, protocol: str, function: str = "") -> str:
    """The protocol's worked examples, in `protocol`'s form (llm.tool_calling: text, constrained, native). With
    the interpreter, a query and then a function: shown only the query, the 1.5B inducer wrote skills that act
    through the notebook (db.execute_query("pick_up()")). The query selects episode_id: shown task_id alone, it
    looked up steps by a task id (`episode_id = 116739`). The function is `function` (option example_file)
    where given, else `example_loop`'s, built from this benchmark's primitives so that it names no action the
    environment lacks."""
    shown = [("I want to see how often the agent succeeded.", "execute_code",
              'show("SELECT episode_id, task_id, success, n_steps FROM episodes")')] if interpreter else []
    if function:
        shown.append(("A function can read where things are in the text the primitives return and act on it.",
                      "write_function(public=True)", function))
    elif loop := example_loop(primitives):
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


def render_exec(out, max_chars: int) -> str:
    """An execute_code result (a sandbox call's output) as the inducer is shown it."""
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
