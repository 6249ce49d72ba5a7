"""The GPU memory check (llm/gpu.py, check.check_gpu_memory): the estimator's table agrees with the models' published
shapes and with the seminar's measured KV capacity, and the GPU presets' jobs, read from the real preset files
through the config check, fit an 80 GiB GPU, or are refused with every term named."""
from __future__ import annotations

import copy
import json
import warnings

import pytest
from snakemake.utils import update_config

from repo import ROOT
from skillrepro.check import check_config, gpu_needs
from skillrepro.config import ConfigError, load_yaml, validate
from skillrepro.llm import gpu

CONFIGS = ROOT / "configs"
# The published config.json of each model of the table (huggingface.co/<id>/blob/main/config.json), the keys the
# estimator reads: the table's parameter counts must be what these shapes hold.
PUBLISHED = {
    "Qwen/Qwen3-8B": {"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                      "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
    "Qwen/Qwen2.5-7B-Instruct": {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
                                 "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                                 "vocab_size": 152064, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
}


def scaffold_paper() -> dict:
    cfg = load_yaml(CONFIGS / "scaffold-paper.yaml")
    cfg["benchmarks"]["alfworld"]["options"]["data_path"] = None  # the official games are the user's (test_config)
    return cfg


def paper_vllm() -> dict:
    cfg = load_yaml(CONFIGS / "paper.yaml")
    update_config(cfg, load_yaml(CONFIGS / "paper-vllm.yaml"))  # as Snakemake merges a second --configfile
    return cfg


def kvcache_gpu() -> dict:
    """configs/kvcache-gpu.yaml with its placeholders filled, the SkillRL checkpoints declared Qwen2.5-7B's."""
    cfg = load_yaml(CONFIGS / "kvcache-gpu.yaml")
    cfg["kvcache"]["bank"] = None
    for m, path in zip(cfg["kvcache"]["models"][1:], ("/ckpt/sft", "/ckpt/rl")):
        m["llm"]["model"] = path
    cfg["cluster"] = {"architectures": {"/ckpt/sft": "Qwen/Qwen2.5-7B-Instruct", "/ckpt/rl": "Qwen/Qwen2.5-7B-Instruct"}}
    return cfg


def needs(cfg: dict) -> dict[str, gpu.Need]:
    found, unknown = gpu_needs(validate(copy.deepcopy(cfg), check_files=False), read_files=False)
    assert not unknown, unknown
    return {n.job: n for n in found}


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_the_table_holds_the_published_shapes(model):
    assert gpu.params_from_config(PUBLISHED[model]) == gpu.ARCHITECTURES[model].params
    assert gpu.architecture_from_config(PUBLISHED[model]) == gpu.ARCHITECTURES[model]


def test_a_checkpoint_folder_is_read_from_its_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(PUBLISHED["Qwen/Qwen2.5-7B-Instruct"]))
    assert gpu.architecture(str(tmp_path)) == gpu.ARCHITECTURES["Qwen/Qwen2.5-7B-Instruct"]
    assert gpu.architecture(str(tmp_path), read_files=False) is None  # a dry run does not read it
    assert gpu.architecture("org/unknown") is None


def test_the_serving_estimate_leaves_the_kv_capacity_the_seminar_measured():
    """kvcache-gpu.yaml: half of an 80 GB H100 (79.6 GiB) gave Qwen2.5-7B-Instruct 419k KV tokens; the estimate's
    weights and overhead leave within 5 % of that, on the safe side."""
    cfg = load_yaml(CONFIGS / "kvcache-gpu.yaml")
    arch = gpu.ARCHITECTURES[cfg["llm"]["model"]]
    need = gpu.serving_need("s", cfg["llm"]["model"], arch, cfg["llm"]["ctx_per_slot"], cfg["llm"]["slots"],
                            cfg["llm"]["vllm_args"], 81559 / 1024)
    measured = cfg["kvcache"]["capacity_tokens"][0]
    assert 0.95 * measured <= gpu.kv_capacity_tokens(need, arch) <= measured
    assert arch.kv_bytes_per_token() == 2 * 28 * 4 * 128 * 2


def test_vllm_flags_are_read_as_argparse_does():
    assert gpu.vllm_arg(["--gpu-memory-utilization", "0.5", "--gpu-memory-utilization=0.7"],
                        "--gpu-memory-utilization") == "0.7"
    arch = gpu.ARCHITECTURES["Qwen/Qwen3-8B"]
    plain = gpu.serving_need("s", "m", arch, 32768, 32, [], 80)
    assert plain.budget == int(80 * 0.9 * gpu.GIB)  # vLLM's default utilization
    fp8 = gpu.serving_need("s", "m", arch, 32768, 32, ["--kv-cache-dtype", "fp8", "--max-model-len", "8192"], 80)
    assert fp8.terms[1] == ("KV cache of one 8192-token sequence", 8192 * arch.kv_bytes_per_token(1))


def test_full_fine_tuning_of_qwen3_8b_does_not_fit_80_gib_and_is_refused_with_its_terms():
    cfg = scaffold_paper()
    assert cfg["scaffold"]["training"]["adapter"] == {"rank": 64, "alpha": 128}
    del cfg["scaffold"]["training"]["adapter"]  # the paper's full fine-tuning
    update = needs(cfg)["SkillScaffold's GRPO update (one GPU, rules/scaffold/grpo.smk)"]
    assert update.gib("weights") + update.gib("gradients") + update.gib("AdamW moments") > 60  # 8 bytes a parameter
    assert update.total / gpu.GIB > 80 and not update.fits
    with pytest.raises(ConfigError) as err:
        check_config(cfg, check_files=False)
    text = str(err.value)
    for part in ("config key scaffold.training", "GRPO update", "model Qwen/Qwen3-8B", "weights 15.3 GiB",
                 "gradients 15.3 GiB", "AdamW moments 30.5 GiB", "checkpointed layer inputs 18.0 GiB", "LM head",
                 f"= {update.total / gpu.GIB:.1f} GiB", "against 80 GiB", "scaffold.training.adapter"):
        assert part in text, (part, text)


def test_scaffold_paper_with_its_adapter_fits_every_gpu_job():
    cfg = scaffold_paper()
    check_config(cfg, check_files=False)  # refuses nothing
    found = needs(cfg)
    update = found["SkillScaffold's GRPO update (one GPU, rules/scaffold/grpo.smk)"]
    assert update.fits and 40 < update.total / gpu.GIB < 80
    assert update.gib("frozen weights") == pytest.approx(8_190_735_360 * 2 / gpu.GIB)
    serve = found["vllm serve of llm.model (every LLM job starts one on its GPU)"]
    assert serve.fits and serve.budget == int(80 * 0.85 * gpu.GIB)  # the preset's --gpu-memory-utilization
    # a smaller card would refuse the update, naming the GPU's memory
    cfg["cluster"]["gpu_memory_gib"] = 40
    with pytest.raises(ConfigError, match=r"GRPO update.*against 40 GiB"):
        check_config(cfg, check_files=False)


@pytest.mark.parametrize("preset", [paper_vllm, kvcache_gpu])
def test_the_serving_presets_fit_an_80_gib_gpu_at_their_lengths(preset):
    cfg = preset()
    check_config(cfg, check_files=False)
    found = needs(cfg)
    assert found and all(n.fits for n in found.values())
    for n in found.values():
        assert n.terms[1][0] == f"KV cache of one {cfg['llm']['ctx_per_slot']}-token sequence"
    if preset is kvcache_gpu:  # every model's own server, the checkpoints' under their own key
        assert {n.key for n in found.values()} == {"llm", "kvcache.models[skillrl-sft].llm",
                                                   "kvcache.models[skillrl-rl].llm"}


def test_a_context_longer_than_the_gpu_holds_is_refused_naming_the_kv_cache():
    cfg = paper_vllm()
    cfg["llm"]["ctx_per_slot"] = 2_000_000
    with pytest.raises(ConfigError, match=r"config key llm: vllm serve of llm.model .*KV cache of one 2000000-token "
                                          r"sequence 106.8 GiB.*lower llm.ctx_per_slot"):
        check_config(cfg, check_files=False)
    cfg["llm"]["base_url"] = "http://gpu-node:8000/v1"  # a served model starts no server: no GPU job
    assert needs(cfg) == {}


def test_an_unknown_model_warns_unless_its_architecture_is_given():
    cfg = paper_vllm()
    cfg["llm"]["model"] = "org/my-finetune"
    with pytest.warns(gpu.GPUMemoryWarning, match=r"'org/my-finetune'.*cluster.architectures\[org/my-finetune\]"):
        check_config(copy.deepcopy(cfg), check_files=False)
    cfg["cluster"] = {"architectures": {"org/my-finetune": "Qwen/Qwen2.5-7B-Instruct"}}
    assert needs(cfg)["vllm serve of llm.model (every LLM job starts one on its GPU)"].fits
    cfg["cluster"]["architectures"]["org/my-finetune"] = "Qwen/Qwen9"
    with pytest.raises(ConfigError, match=r"cluster.architectures\[org/my-finetune\]: 'Qwen/Qwen9' is not a model"):
        check_config(cfg, check_files=False)


def test_a_cpu_config_is_not_checked():
    cfg = load_yaml(ROOT / "config.yaml")
    cfg["cluster"] = {"gpu_memory_gib": 0.001}  # nothing would fit, were anything a GPU job
    with warnings.catch_warnings():
        warnings.simplefilter("error", gpu.GPUMemoryWarning)
        check_config(cfg)
    assert gpu_needs(validate(cfg), read_files=False) == ([], [])
    scaffold = load_yaml(CONFIGS / "scaffold.yaml")  # SkillScaffold's GRPO on the CPU: embedded, no GPU update
    assert gpu_needs(validate(scaffold, check_files=False), read_files=False) == ([], [])
