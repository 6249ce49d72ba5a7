"""Time to read a GGUF file into a float32 transformers model and its tokenizer, as the CPU scorer does for a file
that is not a shipped model's cached folder (a user's own GGUF; the check that an exported checkpoint reads back).

    python perf/gguf_read.py [--model smollm2-135m] [--repeat 2]

Baseline: 29.0 s for SmolLM2-135M on an idle 2-core machine before 6dd76c1, when transformers had gguf-py parse
the file's metadata three times per load and rebuild its tensor-name map for every module.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from skillrepro.llm.models import resolve
from skillrepro.llm.scorer import _read_gguf

BASELINE_S = {"smollm2-135m": 29.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    path, base = Path(resolve(a.model)), BASELINE_S.get(a.model)
    for _ in range(a.repeat):
        started = time.perf_counter()
        lm = _read_gguf(path)[0]
        took = time.perf_counter() - started
        print(f"{a.model}: read {sum(p.numel() for p in lm.parameters()) / 1e6:.0f}M parameters in {took:.1f} s"
              + (f" (baseline {base:.1f} s)" if base else ""))


if __name__ == "__main__":
    main()
