"""Write a randomly initialised InternLM2 chat checkpoint in the real layout (config.json, sharded
safetensors with packed `attention.wqkv`, sentencepiece tokenizer.model with the special tokens on
placeholder pieces, tokenizer_config.json), loadable by `tinyagent.models.internlm2.InternLM2Chat`.

For measuring speed with the real shapes when the real weights cannot be downloaded:
`python bench/make_random_internlm2.py OUT --shape 1_8b` (internlm2-chat-1_8b's shapes, bf16, 3.8 GB).
The tokenizer is trained here on the benchmark's own texts, so token counts are only near the real ones.
"""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Iterable
from pathlib import Path

from recorded import EPISODES, load_episodes, tokenizer_texts

# internlm/internlm2-chat-1_8b's config.json shapes; "tiny" keeps the layout and vocabulary for CPU checks.
SHAPES = {
    "1_8b": {
        "hidden_size": 2048,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "intermediate_size": 8192,
        "vocab_size": 92544,
    },
    "tiny": {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 92544,
    },
}
# InternLM2's special tokens, which the real tokenizer.model holds as placeholder pieces [UNUSED_TOKEN_141..146].
SPECIALS = ["<|plugin|>", "<|interpreter|>", "<|action_end|>", "<|action_start|>", "<|im_end|>", "<|im_start|>"]
SHARD_BYTES = 2 * 1024**3


def train_tokenizer(texts: Iterable[str], vocab_size: int, trained_pieces: int = 4000) -> bytes:
    """A sentencepiece BPE model of `vocab_size` pieces: about `trained_pieces` trained on `texts` (byte
    fallback, InternLM2's <unk>/<s>/</s> ids), unused pieces up to the vocabulary size (so every id the
    model can emit decodes), and the special-token placeholders last, as in InternLM2's tokenizer.model."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([line for text in texts for line in text.splitlines() if line.strip()]),
        model_writer=buffer,
        vocab_size=trained_pieces,
        hard_vocab_limit=False,
        model_type="bpe",
        byte_fallback=True,
        character_coverage=1.0,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        split_digits=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    proto = pb.ModelProto.FromString(buffer.getvalue())
    if len(proto.pieces) + len(SPECIALS) > vocab_size:
        raise ValueError(f"{len(proto.pieces)} trained pieces do not fit a vocabulary of {vocab_size}")
    for k in range(vocab_size - len(SPECIALS) - len(proto.pieces)):
        piece = proto.pieces.add()
        piece.piece, piece.type, piece.score = f"[UNUSED_{k}]", pb.ModelProto.SentencePiece.UNUSED, 0.0
    for k in range(len(SPECIALS)):
        piece = proto.pieces.add()
        piece.piece, piece.type = f"[UNUSED_TOKEN_{141 + k}]", pb.ModelProto.SentencePiece.USER_DEFINED
    return proto.SerializeToString()


def tokenizer_config(first_special: int) -> dict:
    """tokenizer_config.json mapping the placeholder ids to InternLM2's special tokens."""
    entry = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
    added = {str(i): {"content": c, **entry} for i, c in enumerate(["<unk>", "<s>", "</s>"])}
    added.update({str(first_special + k): {"content": c, **entry} for k, c in enumerate(SPECIALS)})
    return {
        "tokenizer_class": "InternLM2Tokenizer",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": SPECIALS,
        "clean_up_tokenization_spaces": False,
    }


def model_config(shape: dict, torch_dtype: str) -> dict:
    """An InternLM2 config.json; rope and limits as internlm2-chat-1_8b's."""
    return {
        "architectures": ["InternLM2ForCausalLM"],
        "model_type": "internlm2",
        "bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 2,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-5,
        "rope_scaling": {"type": "dynamic", "factor": 2.0},
        "rope_theta": 1000000,
        "tie_word_embeddings": False,
        "torch_dtype": torch_dtype,
        "use_cache": True,
        **shape,
    }


def random_tensors(shape: dict, dtype, seed: int):
    """(name, tensor) in InternLM2's layout, normal(0, 0.02) weights and unit norms, one at a time."""
    import torch

    g = torch.Generator().manual_seed(seed)
    hidden, inter, vocab = shape["hidden_size"], shape["intermediate_size"], shape["vocab_size"]
    heads, kv_heads = shape["num_attention_heads"], shape["num_key_value_heads"]
    qkv_rows = (heads + 2 * kv_heads) * (hidden // heads)

    def normal(*size):
        return (torch.randn(*size, generator=g) * 0.02).to(dtype)

    yield "model.tok_embeddings.weight", normal(vocab, hidden)
    for i in range(shape["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "attention.wqkv.weight", normal(qkv_rows, hidden)
        yield p + "attention.wo.weight", normal(hidden, hidden)
        yield p + "feed_forward.w1.weight", normal(inter, hidden)
        yield p + "feed_forward.w3.weight", normal(inter, hidden)
        yield p + "feed_forward.w2.weight", normal(hidden, inter)
        yield p + "attention_norm.weight", torch.ones(hidden, dtype=dtype)
        yield p + "ffn_norm.weight", torch.ones(hidden, dtype=dtype)
    yield "model.norm.weight", torch.ones(hidden, dtype=dtype)
    yield "output.weight", normal(vocab, hidden)


def write_checkpoint(
    folder: str | Path, shape: str | dict = "1_8b", texts: Iterable[str] = (), dtype: str = "bfloat16", seed: int = 0
) -> Path:
    """Write the checkpoint to `folder` (created) and return it; `texts` train the tokenizer."""
    import torch
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shape = SHAPES[shape] if isinstance(shape, str) else shape
    model = train_tokenizer(
        list(texts) or ["Thought: Action: Action Input: Observation: Final Answer:"], shape["vocab_size"]
    )
    (folder / "tokenizer.model").write_bytes(model)
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(shape["vocab_size"] - len(SPECIALS))))
    (folder / "config.json").write_text(json.dumps(model_config(shape, dtype)))
    shards: list[dict] = [{}]
    size = 0
    for name, tensor in random_tensors(shape, getattr(torch, dtype), seed):
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][name], size = tensor, size + nbytes
    weight_map = {}
    for n, shard in enumerate(shards, 1):
        file = f"model-{n:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, file))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1_8b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    texts = tokenizer_texts(load_episodes(sorted(EPISODES.glob("*.jsonl"))))
    print(write_checkpoint(args.folder, args.shape, texts, args.dtype, args.seed))


if __name__ == "__main__":
    main()
