"""InternLM2 checkpoints loaded as transformers' Llama, without their remote code.

InternLM2 is Llama with other tensor names and a packed query/key/value projection, so the
weights are renamed and unpacked onto `LlamaForCausalLM`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .internlm2_tokenizer import load_internlm2_tokenizer
from .loading import placement

# InternLM2 tensor name -> Llama tensor name (the packed `attention.wqkv` is split separately).
_RENAMES = [
    (r"^model\.tok_embeddings\.", "model.embed_tokens."),
    (r"\.attention\.wo\.", ".self_attn.o_proj."),
    (r"\.feed_forward\.w1\.", ".mlp.gate_proj."),
    (r"\.feed_forward\.w3\.", ".mlp.up_proj."),
    (r"\.feed_forward\.w2\.", ".mlp.down_proj."),
    (r"\.attention_norm\.", ".input_layernorm."),
    (r"\.ffn_norm\.", ".post_attention_layernorm."),
    (r"^output\.", "lm_head."),
]
_WQKV = re.compile(r"^(model\.layers\.\d+)\.attention\.wqkv\.(weight|bias)$")
_KNOWN = re.compile(
    r"^(model\.(embed_tokens|norm|layers\.\d+\."
    r"(self_attn|mlp|input_layernorm|post_attention_layernorm))|lm_head)\."
)


def llama_config(config: dict):
    """A `LlamaConfig` equivalent to an InternLM2 config.json."""
    from transformers import LlamaConfig

    if config.get("model_type") != "internlm2":
        raise ValueError(f"not an InternLM2 checkpoint (model_type is {config.get('model_type')!r})")
    heads = config["num_attention_heads"]
    rope = {"rope_type": "default", "rope_theta": float(config.get("rope_theta", 10000.0))}
    scaling = config.get("rope_scaling")
    if scaling:
        kind = scaling.get("type") or scaling.get("rope_type")
        if kind not in ("dynamic", "linear"):
            raise ValueError(f"unsupported InternLM2 rope_scaling {scaling!r} (dynamic and linear are supported)")
        rope.update(rope_type=kind, factor=float(scaling["factor"]))
    return LlamaConfig(
        vocab_size=config["vocab_size"],
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        num_hidden_layers=config["num_hidden_layers"],
        num_attention_heads=heads,
        num_key_value_heads=config.get("num_key_value_heads") or heads,
        head_dim=config["hidden_size"] // heads,
        hidden_act=config.get("hidden_act", "silu"),
        max_position_embeddings=config.get("max_position_embeddings", 2048),
        rms_norm_eps=config.get("rms_norm_eps", 1e-6),
        attention_bias=bool(config.get("bias", False)),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        rope_parameters=rope,
        bos_token_id=config.get("bos_token_id", 1),
        eos_token_id=config.get("eos_token_id", 2),
        pad_token_id=config.get("pad_token_id"),
    )


def split_wqkv(tensor, kv_heads: int, head_dim: int):
    """(q, k, v) from a packed wqkv weight or bias, whose rows are (kv_heads, groups + 2, head_dim):
    per key/value head, its `groups` query heads, then the key head, then the value head."""
    rest = tensor.shape[1:]
    packed = tensor.reshape(kv_heads, -1, head_dim, *rest)
    return (
        packed[:, :-2].reshape(-1, *rest).contiguous(),
        packed[:, -2].reshape(-1, *rest).contiguous(),
        packed[:, -1].reshape(-1, *rest).contiguous(),
    )


def convert_state_dict(weights: dict, config, dtype=None) -> dict:
    """InternLM2 tensors -> `LlamaForCausalLM` tensors, cast to `dtype` if given.

    `weights` is consumed tensor by tensor, so the checkpoint is not held twice in memory.
    """
    out = {}
    for name in list(weights):
        tensor = weights.pop(name)
        if name.endswith("rotary_emb.inv_freq"):
            continue  # recomputed from the config
        if dtype is not None:
            tensor = tensor.to(dtype)
        packed = _WQKV.match(name)
        if packed:
            layer, kind = packed.groups()
            q, k, v = split_wqkv(tensor, config.num_key_value_heads, config.head_dim)
            for proj, part in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
                out[f"{layer}.self_attn.{proj}.{kind}"] = part
            continue
        for pattern, repl in _RENAMES:
            name = re.sub(pattern, repl, name)
        if not _KNOWN.match(name):
            raise ValueError(f"unexpected tensor {name!r} in the InternLM2 checkpoint")
        out[name] = tensor
    if config.tie_word_embeddings:
        out.pop("lm_head.weight", None)
    return out


def read_weights(folder: Path) -> dict:
    """All tensors of a checkpoint folder: safetensors or PyTorch .bin, sharded or not."""
    import torch
    from safetensors.torch import load_file

    for index_name, single in (
        ("model.safetensors.index.json", "model.safetensors"),
        ("pytorch_model.bin.index.json", "pytorch_model.bin"),
    ):
        index = folder / index_name
        files = (
            sorted(set(json.loads(index.read_text())["weight_map"].values()))
            if index.is_file()
            else [single]
            if (folder / single).is_file()
            else []
        )
        if files:
            break
    else:
        raise FileNotFoundError(f"{folder} has no model.safetensors or pytorch_model.bin (or their index)")
    weights: dict = {}
    for file in files:
        path = folder / file
        weights.update(
            load_file(str(path))
            if file.endswith(".safetensors")
            else torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        )
    return weights


def local_folder(path_or_id: str) -> Path:
    """A local checkpoint folder, downloading a hub id's config, tokenizer and weights when needed."""
    if Path(path_or_id).is_dir():
        return Path(path_or_id)
    from huggingface_hub import snapshot_download

    folder = Path(snapshot_download(path_or_id, allow_patterns=["*.json", "*.model", "*.safetensors"]))
    if not any(folder.glob("*.safetensors")):
        folder = Path(snapshot_download(path_or_id, allow_patterns=["*.json", "*.model", "*.bin"]))
    return folder


def load_internlm2(path_or_id: str, device: str = "auto", dtype="auto"):
    """(LlamaForCausalLM, tokenizer) from an InternLM2 checkpoint, without its remote code."""
    from transformers import GenerationConfig, LlamaForCausalLM

    folder = local_folder(path_or_id)
    config = llama_config(json.loads((folder / "config.json").read_text()))
    tokenizer = load_internlm2_tokenizer(folder)
    device_map, torch_dtype = placement(device, dtype)
    weights = convert_state_dict(read_weights(folder), config, torch_dtype)
    model = LlamaForCausalLM.from_pretrained(
        None, config=config, state_dict=weights, dtype=torch_dtype, device_map=device_map
    )
    del weights
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id if config.pad_token_id is not None else config.eos_token_id,
    )
    model.eval()
    return model, tokenizer
