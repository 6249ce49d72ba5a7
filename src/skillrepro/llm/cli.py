"""`skillrepro models` and `skillrepro serve`: the shipped GGUF models and the embedded server."""
from __future__ import annotations

import argparse
import json
import socket
import sys
import time

from skillrepro.llm.models import MODELS, ModelError, resolve
from skillrepro.llm.servers import URL_ENV, serve_embedded


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models")  # their help: skillrepro.cli.COMMANDS
    p.add_argument("--fetch", metavar="NAME", help="download, assemble and verify this model; print its path")
    p.set_defaults(func=_models)
    p = sub.add_parser("serve")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--ctx-per-slot", type=int, default=8192)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on: 0.0.0.0 for jobs on other nodes of a cluster (docs/cluster.md)")
    p.add_argument("--port", type=int, default=0, help="0: an ephemeral port")
    p.set_defaults(func=_serve)


def _models(a: argparse.Namespace) -> int:
    if a.fetch:
        try:
            print(resolve(a.fetch, report=lambda line: print(line, file=sys.stderr)))  # stdout: the path alone
        except ModelError as e:
            raise SystemExit(f"skillrepro models: {e}") from None
        return 0
    for m in MODELS.values():
        print(json.dumps({"name": m.name, "file": m.filename, "upstream": m.hf_id, "sha256": m.sha256,
                          "served_as": m.served_as}))
    return 0


def _serve(a: argparse.Namespace) -> int:
    server = serve_embedded(a.model, a.slots, a.ctx_per_slot, a.threads, a.host, a.port)
    address = server.listening_address
    if a.host in ("0.0.0.0", "::"):  # every interface: name this node, which other nodes can route to
        address = address.replace(a.host, socket.gethostname(), 1)
    print(f"export {URL_ENV}={address}/v1", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
