"""What a GPU job needs of its GPU's memory, estimated before any job is booked (skillrepro.check.check_gpu_memory).

Two kinds of GPU job: a `vllm serve` of a model (`serving_need`) and SkillScaffold's GRPO update (`training_need`).
Each estimate is a list of named terms in bytes, compared with what the job may use of one GPU
(`cluster.gpu_memory_gib`). The figures are estimates from the models' published architectures (ARCHITECTURES) and
the code's precision, not measurements: these machines have no GPU.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

GIB = 1024 ** 3
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1, "fp8_e4m3": 1,
               "fp8_e5m2": 1}
# vLLM's --gpu-memory-utilization when llm.vllm_args gives none (vLLM 0.11.0's default)
VLLM_UTILIZATION = 0.9
# Memory vLLM takes from its budget beside the weights and the KV cache: the CUDA context, CUDA graphs and the
# activations of its profile run. From the seminar's figure (configs/kvcache-gpu.yaml): half of an 80 GB H100
# (79.6 GiB) gave Qwen2.5-7B-Instruct 419k KV tokens, i.e. 39.8 - 14.2 (weights) - 22.4 (KV) = 3.3 GiB; rounded up.
VLLM_OVERHEAD = 4 * GIB
# A training process's CUDA context and the caching allocator's fragmentation (an estimate).
TRAINING_OVERHEAD = 2 * GIB
# TRL's fused LM head (trl/kernels/chunked_logprob.py, TRL 1.16.0): the logits are never whole; its backward
# recomputes tiles of TOKEN_CHUNK_SIZE positions x _CHUNKED_LOGPROB_CHUNK_SIZE vocabulary entries.
TRL_TOKEN_TILE, TRL_VOCAB_TILE = 4096, 32768


class GPUMemoryWarning(UserWarning):
    """A GPU job whose need the check cannot estimate (its model's architecture is unknown)."""


@dataclass(frozen=True)
class Architecture:
    """A decoder-only transformer's shape, as its Hugging Face config.json states it."""

    params: int  # every parameter, embeddings and LM head included
    layers: int  # num_hidden_layers
    heads: int  # num_attention_heads
    kv_heads: int  # num_key_value_heads
    head_dim: int
    hidden: int  # hidden_size
    intermediate: int  # intermediate_size (the MLP's)
    vocab: int  # vocab_size
    dtype: str = "bfloat16"  # torch_dtype: what transformers' dtype="auto" and vLLM's --dtype auto load

    @property
    def weight_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def kv_bytes_per_token(self, kv_dtype_bytes: int = 2) -> int:
        """A token's K and V in every layer: 2 x layers x kv_heads x head_dim x bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * kv_dtype_bytes

    def lora_params(self, rank: int, targets: Iterable[str]) -> int:
        """Parameters of a rank-`rank` LoRA adapter on each layer's `targets` (A: in x r, B: r x out)."""
        q, kv, h, i = self.heads * self.head_dim, self.kv_heads * self.head_dim, self.hidden, self.intermediate
        shapes = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                  "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
        unknown = sorted(set(targets) - set(shapes))
        if unknown:
            raise ValueError(f"no shape for LoRA target(s) {', '.join(unknown)}; known: {', '.join(shapes)}")
        return self.layers * rank * sum(a + b for a, b in (shapes[t] for t in targets))


# The models the GPU presets name, from their published config.json (huggingface.co/<id>/blob/main/config.json)
# and the parameter count of their safetensors (the model cards' 8.2B and 7.61B; `params_from_config` gives the
# same counts from the config's shapes). configs/kvcache-gpu.yaml's SkillRL checkpoints are Qwen2.5-7B-Instruct's.
ARCHITECTURES: dict[str, Architecture] = {
    # configs/scaffold-paper.yaml
    "Qwen/Qwen3-8B": Architecture(params=8_190_735_360, layers=36, heads=32, kv_heads=8, head_dim=128, hidden=4096,
                                  intermediate=12288, vocab=151936),
    # configs/paper-vllm.yaml, configs/kvcache-gpu.yaml
    "Qwen/Qwen2.5-7B-Instruct": Architecture(params=7_615_616_512, layers=28, heads=28, kv_heads=4, head_dim=128,
                                             hidden=3584, intermediate=18944, vocab=152064),
}

# model_type values whose layers are Llama's (q/k/v/o, gated MLP, two norms a layer): params_from_config counts them
LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3")


def params_from_config(cfg: Mapping) -> int:
    """The parameter count of a Llama-like config.json: embeddings, per layer q/k/v/o (with Qwen2's q/k/v biases and
    Qwen3's q/k norms), the gated MLP and two norms, the final norm, and an untied LM head."""
    h, layers, v = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    d = cfg.get("head_dim") or h // heads
    kind = cfg.get("model_type")
    attn = h * heads * d + 2 * h * kv * d + heads * d * h
    if kind == "qwen2":
        attn += heads * d + 2 * kv * d
    if kind == "qwen3":
        attn += 2 * d
    layer = attn + 3 * h * cfg["intermediate_size"] + 2 * h
    return v * h * (1 if cfg.get("tie_word_embeddings") else 2) + layers * layer + h


def architecture_from_config(cfg: Mapping) -> Architecture:
    """An Architecture from a Llama-like config.json (a ValueError for another model_type)."""
    if cfg.get("model_type") not in LLAMA_LIKE:
        raise ValueError(f"model_type {cfg.get('model_type')!r} is not one whose parameters are counted here "
                         f"({', '.join(LLAMA_LIKE)})")
    heads = cfg["num_attention_heads"]
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    return Architecture(params=params_from_config(cfg), layers=cfg["num_hidden_layers"], heads=heads,
                        kv_heads=cfg.get("num_key_value_heads", heads),
                        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads, hidden=cfg["hidden_size"],
                        intermediate=cfg["intermediate_size"], vocab=cfg["vocab_size"],
                        dtype=dtype if dtype in DTYPE_BYTES else "bfloat16")


def architecture(model: str, given: Mapping[str, Architecture] | None = None,
                 read_files: bool = True) -> Architecture | None:
    """`model`'s architecture: the config's own entry (`given`), the table, or (`read_files`) the config.json of a
    local checkpoint folder (kvcache-gpu's SkillRL checkpoints); None when none of them knows it."""
    if given and model in given:
        return given[model]
    if model in ARCHITECTURES:
        return ARCHITECTURES[model]
    config_json = Path(model).expanduser() / "config.json"
    if read_files and config_json.is_file():
        try:
            return architecture_from_config(json.loads(config_json.read_text()))
        except (ValueError, KeyError):
            return None
    return None


@dataclass(frozen=True)
class Need:
    """One GPU job's estimated memory: its terms (name, bytes) against what it may use of the GPU."""

    job: str  # what the job is, for the message (e.g. "vllm serve for every LLM job (llm.model)")
    model: str
    key: str  # the config section whose settings make the need (the error names it)
    terms: tuple[tuple[str, int], ...]
    budget: int  # bytes the job may use
    budget_note: str  # how the budget is made (GPU memory x --gpu-memory-utilization)
    advice: str  # what would make it fit

    @property
    def total(self) -> int:
        return sum(b for _, b in self.terms)

    @property
    def fits(self) -> bool:
        return self.total <= self.budget

    def gib(self, name: str) -> float:
        return dict(self.terms)[name] / GIB

    def describe(self) -> str:
        terms = " + ".join(f"{name} {b / GIB:.1f} GiB" for name, b in self.terms)
        return (f"config key {self.key}: {self.job}, model {self.model}: {terms} = {self.total / GIB:.1f} GiB, against {self.budget_note} "
                f"= {self.budget / GIB:.1f} GiB")


def vllm_arg(args: Iterable[str], flag: str) -> str | None:
    """The value of `flag` in a vLLM command line (`--flag value` or `--flag=value`); the last one wins, as
    argparse takes it (vllm_command puts llm.vllm_args after the project's own flags)."""
    args, found = list(args), None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            found = args[i + 1]
        elif a.startswith(flag + "="):
            found = a.split("=", 1)[1]
    return found


def serving_need(job: str, model: str, arch: Architecture, ctx_per_slot: int, slots: int, vllm_args: Iterable[str],
                 gpu_memory_gib: float, key: str = "llm") -> Need:
    """`vllm serve` of `model` with `--max-model-len ctx_per_slot --max-num-seqs slots` and `vllm_args`.

    vLLM takes gpu_memory_gib x --gpu-memory-utilization (0.9 unless llm.vllm_args gives it) and refuses to start
    unless its KV cache holds at least one sequence of --max-model-len tokens. The need is
        weights        params x bytes of --dtype (the checkpoint's torch_dtype, bf16, unless vllm_args gives one)
      + KV cache       ctx_per_slot x 2 x layers x kv_heads x head_dim x bytes of --kv-cache-dtype (the weights')
      + sampler logits slots x vocab x 4 bytes (the profile run samples every sequence at once, in fp32)
      + overhead       VLLM_OVERHEAD (CUDA context, CUDA graphs, the profile run's activations).
    Whatever the budget leaves beyond it is more KV cache (more sequences at once), not a need."""
    args = list(vllm_args)
    util = float(vllm_arg(args, "--gpu-memory-utilization") or VLLM_UTILIZATION)
    ctx = int(vllm_arg(args, "--max-model-len") or ctx_per_slot)
    dtype = vllm_arg(args, "--dtype")
    w = DTYPE_BYTES.get(dtype, arch.weight_bytes) if dtype and dtype != "auto" else arch.weight_bytes
    kv_dtype = vllm_arg(args, "--kv-cache-dtype")
    kv = DTYPE_BYTES.get(kv_dtype, w) if kv_dtype and kv_dtype != "auto" else w
    terms = (("weights", arch.params * w), (f"KV cache of one {ctx}-token sequence", ctx * arch.kv_bytes_per_token(kv)),
             ("sampler logits", slots * arch.vocab * 4), ("overhead", VLLM_OVERHEAD))
    return Need(job, model, key, terms, int(gpu_memory_gib * util * GIB),
                f"{gpu_memory_gib:g} GiB x {util:g} (--gpu-memory-utilization)",
                f"lower {key}.ctx_per_slot (vLLM's --max-model-len), give vLLM more of the GPU "
                f"(--gpu-memory-utilization in {key}.vllm_args), or a GPU with more memory (cluster.gpu_memory_gib)")


def kv_capacity_tokens(need: Need, arch: Architecture, kv_dtype_bytes: int = 2) -> int:
    """Tokens of KV cache the budget leaves beside the weights, sampler and overhead (what vLLM logs as "GPU KV cache
    size"), for `need` from serving_need."""
    rest = need.budget - sum(b for n, b in need.terms if not n.startswith("KV cache"))
    return max(0, rest // arch.kv_bytes_per_token(kv_dtype_bytes))


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter's shape (scaffold.training.adapter), for its memory."""

    rank: int
    targets: tuple[str, ...]


def training_need(job: str, model: str, arch: Architecture, max_sequence_tokens: int, micro_batch_size: int,
                  gpu_memory_gib: float, adapter: Adapter | None = None) -> Need:
    """SkillScaffold's GRPO update (studies/scaffold/grpo.py: TRL's GRPOTrainer, torch AdamW, gradient checkpointing
    on a GPU) of `model` at micro_batch_size sequences of max_sequence_tokens.

    Precision, as the code runs: load_policy loads the checkpoint's torch_dtype (bf16, dtype="auto"), GRPOConfig has
    bf16=False (no autocast, no fp32 master copy), and torch's AdamW keeps its two moments in each parameter's dtype.
    With w = bytes of that dtype, P = parameters, N = micro_batch_size x max_sequence_tokens:
      full fine-tuning  weights P x w + gradients P x w + AdamW moments 2 x P x w
      LoRA adapter      frozen weights P x w + the adapter's A parameters in fp32 (peft's autocast_adapter_dtype):
                        A x (4 weights + 4 gradients + 8 moments)
      + checkpointed layer inputs   layers x N x hidden x w
      + one layer recomputed        2 x N x (4 hidden + 2 kv_heads x head_dim + 3 intermediate) x w
                                    (its saved activations, and their gradients as its backward makes them)
      + attention mask              micro_batch_size x max_sequence_tokens^2 bytes (the boolean mask sdpa is given
                                    for a padded batch; the attention itself is sdpa's, linear in N)
      + LM head (TRL's fused head, trl/kernels/chunked_logprob.py: no whole logits) one tile of 4096 x 32768 logits
                                    in fp32, the fp32 gradient of the last hidden states N x hidden x 4, and, when
                                    the head trains (full fine-tuning), its fp32 gradient accumulator vocab x hidden x 4
      + overhead                    TRAINING_OVERHEAD (CUDA context, allocator fragmentation)
    against the whole GPU (no vLLM shares an update's GPU)."""
    w, n = arch.weight_bytes, micro_batch_size * max_sequence_tokens
    if adapter is None:
        terms = [("weights", arch.params * w), ("gradients", arch.params * w), ("AdamW moments", 2 * arch.params * w)]
    else:
        a = arch.lora_params(adapter.rank, adapter.targets)
        terms = [("frozen weights", arch.params * w), (f"LoRA adapter ({a / 1e6:.0f}M parameters, fp32) with its "
                                                       "gradients and AdamW moments", 16 * a)]
    layer = 4 * arch.hidden + 2 * arch.kv_heads * arch.head_dim + 3 * arch.intermediate
    head = TRL_TOKEN_TILE * TRL_VOCAB_TILE * 4 + n * arch.hidden * 4 + (0 if adapter else arch.vocab * arch.hidden * 4)
    terms += [("checkpointed layer inputs", arch.layers * n * arch.hidden * w), ("one layer recomputed", 2 * n * layer * w),
              ("attention mask", micro_batch_size * max_sequence_tokens ** 2), ("LM head", head),
              ("overhead", TRAINING_OVERHEAD)]
    return Need(job, model, "scaffold.training", tuple(terms), int(gpu_memory_gib * GIB),
                f"{gpu_memory_gib:g} GiB (cluster.gpu_memory_gib)",
                "train a LoRA adapter (scaffold.training.adapter, e.g. {rank: 64, alpha: 128}), lower "
                "scaffold.training.micro_batch_size or max_sequence_tokens, or a GPU with more memory "
                "(cluster.gpu_memory_gib)")
