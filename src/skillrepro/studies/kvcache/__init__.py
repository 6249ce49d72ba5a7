"""KV-cache reuse study: ALFWorld prompt formats built from a skill bank, tokenizers, a vLLM-faithful
prefix-cache simulator (and a llama.cpp single-slot model), and static shared-prefix analyses."""
