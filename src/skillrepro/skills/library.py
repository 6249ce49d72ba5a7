"""A library version is a folder `v{k}/`: `skills.py` (the functions), `notes.md` (prompt text a method
keeps for the actor, empty for code-only methods) and `manifest.json` (written last; its presence marks a
complete version). A written version is never changed: methods write v{k+1} from v{k}.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from skillrepro.store import atomic_dir


@dataclass(frozen=True)
class SkillFunction:
    name: str
    public: bool
    signature: str
    doc: str
    source: str
    callees: tuple[str, ...] = ()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


@dataclass(frozen=True)
class Library:
    version: int
    functions: tuple[SkillFunction, ...] = ()
    notes: str = ""
    meta: dict = field(default_factory=dict)  # who wrote it and how (method, session id)

    def public(self) -> list[SkillFunction]:
        return [f for f in self.functions if f.public]

    @property
    def source(self) -> str:
        return "\n\n".join(f.source.rstrip() for f in self.functions) + ("\n" if self.functions else "")

    @classmethod
    def load(cls, folder: str | Path) -> "Library":
        folder = Path(folder)
        manifest = folder / "manifest.json"
        if not manifest.is_file():
            raise FileNotFoundError(f"{folder} is not a complete library version (no manifest.json)")
        m = json.loads(manifest.read_text())
        funcs = tuple(
            SkillFunction(**{k: v for k, v in f.items() if k != "sha256"} | {"callees": tuple(f["callees"])})
            for f in m["functions"]
        )
        return cls(m["version"], funcs, (folder / "notes.md").read_text(), m.get("meta", {}))

    @classmethod
    def from_folder(cls, folder: str | Path) -> "Library":
        """Library v0 from a folder a person gives (a reference library, a start library): `skills.py`, its
        top-level functions (a name starting with an underscore stays private, callable from the others), and
        optionally `notes.md`. A library version folder a run wrote is such a folder too. ValueError saying why
        it is not a usable library."""
        folder = Path(folder)
        source_file = folder / "skills.py"
        if not folder.is_dir():
            raise ValueError(f"{folder} is not a folder")
        if not source_file.is_file():
            raise ValueError(f"{folder} has no skills.py")
        try:
            functions = parse_functions(source_file.read_text())
        except SyntaxError as e:
            raise ValueError(f"{source_file} does not parse: {e}") from None
        if not any(f.public for f in functions):
            raise ValueError(f"{source_file} defines no public function (one whose name does not start with '_')")
        notes = folder / "notes.md"
        return cls(0, functions, notes.read_text() if notes.is_file() else "")

    def write(self, folder: str | Path) -> Path:
        """Write this version to `folder` atomically (a temporary sibling folder, then rename)."""
        folder = Path(folder)
        if (folder / "manifest.json").exists():
            raise FileExistsError(f"library version {folder} already exists and is never rewritten")
        with atomic_dir(folder) as tmp:  # the umask's folder mode, not mkdtemp's 0700
            (tmp / "skills.py").write_text(self.source)
            (tmp / "notes.md").write_text(self.notes)
            manifest = {
                "version": self.version,
                "functions": [asdict(f) | {"sha256": f.sha256} for f in self.functions],
                "meta": self.meta,
            }
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
            if folder.exists():
                shutil.rmtree(folder)  # an incomplete earlier attempt (no manifest)
            os.replace(tmp, folder)
        return folder

    def next_version(self, **changes) -> "Library":
        return replace(self, version=self.version + 1, **changes)


MAX_SOURCE_CHARS = 200_000  # model-written code longer than this is refused unread
MAX_NESTING = 100  # AST depth; deeper trees crash ast.unparse and compile with RecursionError


def parse_untrusted(source: str, mode: str = "exec") -> ast.AST:
    """ast.parse for model-written code: bounded in size and nesting, and every way the parser can fail
    (RecursionError, MemoryError, ValueError for NUL bytes) comes back as a SyntaxError naming the cause,
    so that the model reads an error instead of the job crashing (again on every rerun)."""
    if len(source) > MAX_SOURCE_CHARS:
        raise SyntaxError(f"the code is {len(source)} characters long; the limit is {MAX_SOURCE_CHARS}")
    try:
        tree = ast.parse(source, mode=mode)
    except (RecursionError, MemoryError, ValueError) as e:
        raise SyntaxError(f"the code cannot be parsed ({type(e).__name__}: nested too deeply or malformed)") from None
    stack = [(tree, 0)]
    while stack:  # iterative: a recursive walk is what this guards against
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise SyntaxError(f"the code is nested more than {MAX_NESTING} levels deep")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return tree


def parse_functions(source: str, public: set[str] | None = None) -> tuple[SkillFunction, ...]:
    """Split Python source into top-level functions; `public` names the ones the actor sees (default: all
    whose names do not start with an underscore)."""
    tree = parse_untrusted(source)
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    lines = _LINE.findall(source)  # once: ast.get_source_segment splits the whole source again for every function
    out = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        callees = sorted({c.func.id for c in ast.walk(node) if isinstance(c, ast.Call)
                          and isinstance(c.func, ast.Name) and c.func.id in names and c.func.id != node.name})
        is_public = (node.name in public) if public is not None else not node.name.startswith("_")
        out.append(SkillFunction(node.name, is_public, f"{node.name}({ast.unparse(node.args)})",
                                 ast.get_docstring(node) or "", _segment(lines, node),
                                 tuple(callees)))
    return tuple(out)


# A line as the parser counts them (ast._splitlines_no_ff): ended by \r\n, \r or \n only, never by the other
# characters str.splitlines takes (\f, \v, \x85, \u2028, ...), which model-written code may hold.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def _segment(lines: list[str], node: ast.AST) -> str:
    """ast.get_source_segment(source, node) from the source's lines (its offsets are in UTF-8 bytes)."""
    first, last = node.lineno - 1, node.end_lineno - 1
    if first == last:
        return lines[first].encode()[node.col_offset:node.end_col_offset].decode()
    return "".join([lines[first].encode()[node.col_offset:].decode(), *lines[first + 1:last],
                    lines[last].encode()[:node.end_col_offset].decode()])
