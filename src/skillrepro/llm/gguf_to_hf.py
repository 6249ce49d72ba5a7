"""Dequantise a GGUF model into a Hugging Face folder (float32 safetensors, config, tokenizer, chat template).

float32 holds every dequantised weight exactly (a block scale times a small integer); bf16 would round each
by up to 0.4 %, which moved log-probs by up to 0.05 nats a token against the transformers scorer.

vLLM's CPU build serves Hugging Face folders, not the GGUF files the project ships (its GGUF kernels are GPU
ones), so `skillrepro.llm.vllm_env.converted` runs this once per shipped model. It runs as a script in the
vLLM environment (`python -P gguf_to_hf.py SRC OUT`), which has transformers, gguf and accelerate; it imports
nothing from skillrepro, which that environment does not have.
"""
import sys
from pathlib import Path


def convert(src: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    if not getattr(tokenizer, "chat_template", None):
        raise SystemExit(f"{src.name}: the GGUF carries no chat template (tokenizer.chat_template)")
    model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32)
    # the loader records the GGUF's quantisation, which save_pretrained refuses to write ("not serializable");
    # the weights it holds are already dequantised
    model.config.quantization_config = None
    model.hf_quantizer = None
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -P gguf_to_hf.py MODEL.gguf OUT_DIR")
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
