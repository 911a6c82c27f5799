"""InternLM2Chat: a tiny random InternLM2 checkpoint in the real layout, converted without remote code,
checked against a reference forward pass of the InternLM2 architecture written here."""

from __future__ import annotations

import io
import json
import math
import os

import pytest
import sentencepiece as spm
import torch

from tinyagent.engine.internlm2_loading import split_wqkv
from tinyagent.engine.internlm2_tokenizer import load_internlm2_tokenizer
from tinyagent.models.internlm2 import DEFAULT_META_INSTRUCTION, InternLM2Chat

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# InternLM2's special tokens; the real checkpoints put them at the end of the vocabulary (92538-92543).
SPECIALS = ["<|plugin|>", "<|interpreter|>", "<|action_end|>", "<|action_start|>", "<|im_end|>", "<|im_start|>"]
CORPUS = """Thought: I need to search for this. Action: google_search Action Input: {"search_query": "Jay Chou"}
Observation: Jay Chou was born on January 18, 1979. Final Answer: 1979
Question: What is 12 times 6? Answer the following questions as best you can. You have access to tools.
You are an AI assistant whose name is InternLM. It is designed to be helpful, honest, and harmless.
周杰伦 哪年 出生 第一张 专辑 是什么 计算器 搜索 书生 浦语 上海人工智能实验室 思考 行动 观察 最终答案
0 1 2 3 4 5 6 7 8 9 + - * / ( ) [ ] { } : , . ? ! " ' = _
""".splitlines()

VARIANTS = {
    # GQA (2 query heads per key/value head), dynamic NTK rope, sharded safetensors
    "gqa-dynamic-safetensors": {
        "heads": 4,
        "kv_heads": 2,
        "bias": False,
        "tie": False,
        "scaling": {"type": "dynamic", "factor": 2.0},
        "fmt": "safetensors",
    },
    # one query head per key/value head, biases, tied embeddings, no rope scaling, a PyTorch .bin file
    "mha-bias-tied-bin": {"heads": 4, "kv_heads": 4, "bias": True, "tie": True, "scaling": None, "fmt": "bin"},
}


def train_sentencepiece() -> bytes:
    """A BPE sentencepiece model whose last pieces are placeholders, like InternLM2's: the checkpoint's
    tokenizer_config.json maps those ids to the special tokens."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 8),
        model_writer=model,
        vocab_size=420,
        model_type="bpe",
        byte_fallback=True,
        character_coverage=1.0,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    proto = pb.ModelProto.FromString(model.getvalue())
    for k in range(len(SPECIALS)):
        piece = proto.pieces.add()
        piece.piece, piece.type = f"[UNUSED_TOKEN_{141 + k}]", pb.ModelProto.SentencePiece.USER_DEFINED
    return proto.SerializeToString()


def write_internlm2(
    folder,
    heads: int,
    kv_heads: int,
    bias: bool,
    tie: bool,
    scaling,
    fmt: str,
    add_bos: bool = True,
    max_pos: int = 32,
    seed: int = 0,
):
    """A random InternLM2 chat checkpoint in the layout of internlm/internlm2-chat-*: returns (config, weights)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    sp_bytes = train_sentencepiece()
    (folder / "tokenizer.model").write_bytes(sp_bytes)
    sp = spm.SentencePieceProcessor(model_proto=sp_bytes)
    n_sp = sp.get_piece_size() - len(SPECIALS)  # ids of the placeholder pieces start here
    added = {
        str(i): {
            "content": c,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for i, c in enumerate(["<unk>", "<s>", "</s>"])
    }
    added.update(
        {
            str(n_sp + k): {
                "content": c,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for k, c in enumerate(SPECIALS)
        }
    )
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "auto_map": {"AutoTokenizer": ["tokenization_internlm2.InternLM2Tokenizer", None]},
                "tokenizer_class": "InternLM2Tokenizer",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "pad_token": "</s>",
                "unk_token": "<unk>",
                "add_bos_token": add_bos,
                "add_eos_token": False,
                "added_tokens_decoder": added,
                "additional_special_tokens": SPECIALS,
                "clean_up_tokenization_spaces": False,
            }
        )
    )
    hidden, layers, inter = 32, 2, 64
    config = {
        "architectures": ["InternLM2ForCausalLM"],
        "model_type": "internlm2",
        "auto_map": {
            "AutoConfig": "configuration_internlm2.InternLM2Config",
            "AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM",
        },
        "attn_implementation": "eager",
        "bias": bias,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": max_pos,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "rms_norm_eps": 1e-5,
        "rope_scaling": scaling,
        "rope_theta": 1000000,
        "tie_word_embeddings": tie,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": sp.get_piece_size(),
    }
    (folder / "config.json").write_text(json.dumps(config))
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=0.2):
        return torch.randn(*shape, generator=g) * scale

    head_dim = hidden // heads
    qkv_rows = (heads + 2 * kv_heads) * head_dim
    w = {
        "model.tok_embeddings.weight": rand(config["vocab_size"], hidden, scale=1.0),
        "model.norm.weight": 1 + rand(hidden),
    }
    if not tie:
        w["output.weight"] = rand(config["vocab_size"], hidden)
    for i in range(layers):
        p = f"model.layers.{i}."
        w.update(
            {
                p + "attention.wqkv.weight": rand(qkv_rows, hidden),
                p + "attention.wo.weight": rand(hidden, hidden),
                p + "feed_forward.w1.weight": rand(inter, hidden),
                p + "feed_forward.w3.weight": rand(inter, hidden),
                p + "feed_forward.w2.weight": rand(hidden, inter),
                p + "attention_norm.weight": 1 + rand(hidden),
                p + "ffn_norm.weight": 1 + rand(hidden),
            }
        )
        if bias:
            w.update({p + "attention.wqkv.bias": rand(qkv_rows), p + "attention.wo.bias": rand(hidden)})
    if fmt == "safetensors":  # two shards and an index, as the real checkpoints ship
        names = sorted(w)
        shards = {
            "model-00001-of-00002.safetensors": names[: len(names) // 2],
            "model-00002-of-00002.safetensors": names[len(names) // 2 :],
        }
        for file, keys in shards.items():
            save_file({k: w[k].contiguous() for k in keys}, str(folder / file), metadata={"format": "pt"})
        weight_map = {k: file for file, keys in shards.items() for k in keys}
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    else:
        torch.save(w, folder / "pytorch_model.bin")
    return config, w


def reference_logits(config: dict, w: dict, ids: list[int]) -> torch.Tensor:
    """InternLM2's forward pass from its architecture, in float64: RMSNorm, packed-wqkv GQA attention with
    NeoX-style (rotate-half) RoPE and dynamic NTK scaling past max_position_embeddings, SwiGLU."""
    W = {k: v.double() for k, v in w.items()}
    T, H = len(ids), config["hidden_size"]
    nh, kv = config["num_attention_heads"], config["num_key_value_heads"]
    hd, groups, eps = H // nh, nh // kv, config["rms_norm_eps"]

    def rms(x, weight):
        return weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    base, max_pos, scaling = config["rope_theta"], config["max_position_embeddings"], config["rope_scaling"]
    if scaling and scaling["type"] == "dynamic" and T > max_pos:
        factor = scaling["factor"]
        base = base * ((factor * T / max_pos) - (factor - 1)) ** (hd / (hd - 2))
    inv_freq = 1.0 / base ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq).repeat(1, 2)
    cos, sin = angles.cos(), angles.sin()

    def rope(x):  # (heads, T, hd): rotate the two halves of each head
        return x * cos + torch.cat([-x[..., hd // 2 :], x[..., : hd // 2]], -1) * sin

    x = W["model.tok_embeddings.weight"][ids]
    causal = torch.full((T, T), -math.inf, dtype=torch.float64).triu(1)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, W[p + "attention_norm.weight"])
        qkv = h @ W[p + "attention.wqkv.weight"].T + (W[p + "attention.wqkv.bias"] if config["bias"] else 0)
        qkv = qkv.view(T, kv, groups + 2, hd)
        q = qkv[:, :, :groups].reshape(T, nh, hd).transpose(0, 1)
        k = qkv[:, :, groups].transpose(0, 1).repeat_interleave(groups, 0)
        v = qkv[:, :, groups + 1].transpose(0, 1).repeat_interleave(groups, 0)
        scores = rope(q) @ rope(k).transpose(1, 2) / math.sqrt(hd) + causal
        attn = (scores.softmax(-1) @ v).transpose(0, 1).reshape(T, H)
        x = x + attn @ W[p + "attention.wo.weight"].T + (W[p + "attention.wo.bias"] if config["bias"] else 0)
        h = rms(x, W[p + "ffn_norm.weight"])
        gate, up = h @ W[p + "feed_forward.w1.weight"].T, h @ W[p + "feed_forward.w3.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ W[p + "feed_forward.w2.weight"].T
    out = W["model.tok_embeddings.weight"] if config["tie_word_embeddings"] else W["output.weight"]
    return rms(x, W["model.norm.weight"]) @ out.T


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def checkpoint(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    config, weights = write_internlm2(folder, **VARIANTS[request.param])
    return folder, config, weights


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    folder = tmp_path_factory.mktemp("internlm2_chat")
    write_internlm2(folder, **VARIANTS["gqa-dynamic-safetensors"], max_pos=512)
    return InternLM2Chat(str(folder))


# --- conversion --------------------------------------------------------------------------


@pytest.mark.parametrize("length", [12, 48])  # 48 > max_position_embeddings: dynamic NTK scaling applies
def test_converted_logits_match_the_reference_forward(checkpoint, length):
    folder, config, weights = checkpoint
    model = InternLM2Chat(str(folder), device="cpu", dtype="float32")
    ids = torch.randint(0, config["vocab_size"], (length,), generator=torch.Generator().manual_seed(length)).tolist()
    with torch.no_grad():
        logits = model.model(torch.tensor([ids])).logits[0].double()
    expected = reference_logits(config, weights, ids)
    assert logits.shape == expected.shape
    assert torch.allclose(logits, expected, atol=1e-4, rtol=0), (logits - expected).abs().max()


def test_config_is_carried_over(checkpoint):
    folder, config, _ = checkpoint
    c = InternLM2Chat(str(folder), device="cpu").model.config
    assert c.num_key_value_heads == config["num_key_value_heads"]
    assert c.rms_norm_eps == config["rms_norm_eps"] and c.attention_bias == config["bias"]
    assert c.tie_word_embeddings == config["tie_word_embeddings"]
    assert c.rope_parameters["rope_theta"] == config["rope_theta"]
    if config["rope_scaling"]:
        assert (c.rope_parameters["rope_type"], c.rope_parameters["factor"]) == ("dynamic", 2.0)
    else:
        assert c.rope_parameters["rope_type"] == "default"


def test_forced_dtype(checkpoint):
    folder, config, weights = checkpoint
    model = InternLM2Chat(str(folder), device="cpu", dtype="bfloat16")
    assert next(model.model.parameters()).dtype == torch.bfloat16
    ids = list(range(3, 15))
    with torch.no_grad():
        logits = model.model(torch.tensor([ids])).logits[0].double()
    expected = reference_logits(config, weights, ids)
    assert (logits - expected).abs().max() < 0.05 * expected.abs().max()


def test_split_wqkv_layout():
    kv_heads, groups, head_dim, hidden = 2, 3, 2, 5
    rows = torch.arange(kv_heads * (groups + 2) * head_dim).repeat_interleave(hidden).view(-1, hidden)
    q, k, v = split_wqkv(rows, kv_heads, head_dim)
    assert q[:, 0].tolist() == [0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15]
    assert k[:, 0].tolist() == [6, 7, 16, 17] and v[:, 0].tolist() == [8, 9, 18, 19]


def test_not_an_internlm2_checkpoint_is_refused(tiny_llama_dir):
    with pytest.raises(ValueError, match="not an InternLM2 checkpoint"):
        InternLM2Chat(str(tiny_llama_dir))


def test_missing_weights_are_reported(tmp_path):
    write_internlm2(tmp_path, **VARIANTS["mha-bias-tied-bin"])
    (tmp_path / "pytorch_model.bin").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors or pytorch_model.bin"):
        InternLM2Chat(str(tmp_path))


# --- tokenizer ---------------------------------------------------------------------------


def test_tokenizer_reads_special_tokens_from_the_config(chat):
    tok = chat.tokenizer
    n_sp = tok.sp_model.get_piece_size() - len(SPECIALS)
    assert tok.sp_model.id_to_piece(n_sp + 5) == "[UNUSED_TOKEN_146]"  # the config, not the piece, decides
    assert tok.convert_tokens_to_ids("<|im_start|>") == n_sp + 5
    assert tok.convert_tokens_to_ids("<|im_end|>") == n_sp + 4
    ids = tok("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False)["input_ids"]
    assert ids[0] == n_sp + 5 and ids[-1] == n_sp + 4
    assert tok.decode(ids) == "<|im_start|>user\nhi<|im_end|>"
    assert tok.decode(ids, skip_special_tokens=True) == "user\nhi"
    assert set(SPECIALS) <= set(chat.control_tokens)
    assert {n_sp + 4, 2} <= set(chat.end_token_ids)


@pytest.mark.parametrize(
    "text", ["Thought: I need to search.\nAction: google_search", "周杰伦哪年出生？ 1979年", "emoji 🙂 and  two spaces"]
)
def test_tokenizer_matches_sentencepiece_and_round_trips(chat, text):
    tok = chat.tokenizer
    assert tok(text, add_special_tokens=False)["input_ids"] == tok.sp_model.encode(text)
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_bos_token_follows_the_config(chat, tmp_path):
    assert chat.tokenizer("hi")["input_ids"] == [1, *chat.tokenizer.sp_model.encode("hi")]
    write_internlm2(tmp_path, **VARIANTS["mha-bias-tied-bin"], add_bos=False)
    tok = load_internlm2_tokenizer(tmp_path)
    assert tok("hi")["input_ids"] == tok.sp_model.encode("hi")
    no_bos = InternLM2Chat.from_model(chat.model, tok)
    assert no_bos.encode_prompt("hi") == tok.sp_model.encode("hi")


def test_decoding_new_tokens_keeps_their_leading_space(chat):
    tok = chat.tokenizer
    prompt = tok("Thought: I", add_special_tokens=False)["input_ids"]
    full = tok("Thought: I need", add_special_tokens=False)["input_ids"]
    assert full[: len(prompt)] == prompt
    assert chat.decode_new(prompt, full[len(prompt) :]) == " need"


# --- prompt and generation ---------------------------------------------------------------


def test_prompt_format_with_default_meta_instruction(chat):
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "2+2?"},
    ]
    assert chat.render_prompt(messages) == (
        f"<|im_start|>system\n{DEFAULT_META_INSTRUCTION}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = chat.encode_prompt(chat.render_prompt(messages))
    assert ids[0] == chat.tokenizer.bos_token_id and ids[1] == chat.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ids.count(chat.tokenizer.bos_token_id) == 1


def test_prompt_with_system_message_and_continued_assistant(chat):
    messages = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "Thought: add"},
    ]
    assert chat.render_prompt(messages) == (
        "<|im_start|>system\nUse tools.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\nThought: add"
    )


def test_generation_ends_at_im_end_and_reuses_the_cache(chat):
    im_end = chat.tokenizer.convert_tokens_to_ids("<|im_end|>")

    def force_end_at_step_3(input_ids, scores):
        if input_ids.shape[1] == prompt_len + 3:
            scores[:] = -float("inf")
            scores[:, im_end] = 0
        return scores

    messages = [{"role": "user", "content": "What is 12 times 6?"}]
    prompt_len = chat.count_tokens(messages)
    chat.reset_cache()
    first = chat.generate(messages, max_new_tokens=10, logits_processor=[force_end_at_step_3])
    assert first.completion_tokens == 4 and first.prompt_tokens == prompt_len
    follow = messages + [{"role": "assistant", "content": f"Thought: {first}\nObservation: 72\n"}]
    reused = chat.generate(follow, stop=["Observation:"], max_new_tokens=8)
    fresh = InternLM2Chat.from_model(chat.model, chat.tokenizer, reuse_cache=False)
    assert reused.cached_tokens > 0
    assert reused.text == fresh.generate(follow, stop=["Observation:"], max_new_tokens=8).text


def test_no_reuse_past_the_dynamic_rope_length(tmp_path):
    """Past max_position_embeddings dynamic NTK changes the rope base with the length, so cached keys
    would differ from a fresh prefill: every call then prefills in full, with identical output."""
    config, _ = write_internlm2(tmp_path, **VARIANTS["gqa-dynamic-safetensors"])
    model = InternLM2Chat(str(tmp_path), device="cpu")
    fresh = InternLM2Chat.from_model(model.model, model.tokenizer, reuse_cache=False)
    messages = [{"role": "user", "content": "What is 12 times 6?"}]
    assert model.count_tokens(messages) > config["max_position_embeddings"]
    first = model.generate(messages, max_new_tokens=6)
    follow = messages + [{"role": "assistant", "content": f"{first}\nObservation: 72\n"}]
    again = model.generate(follow, max_new_tokens=6)
    assert again.cached_tokens == 0
    assert again.text == fresh.generate(follow, max_new_tokens=6).text
