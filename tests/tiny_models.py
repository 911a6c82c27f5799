"""Tiny random models the tests build themselves: offline, deterministic, fast.

`build_tiny_llama(path)` writes a Hugging Face model folder (config, safetensors weights and a
real byte-level BPE tokenizer trained here, with a ChatML chat template), loadable by
`AutoModelForCausalLM` / `AutoTokenizer` and servable by `transformers serve`.
"""

from __future__ import annotations

from pathlib import Path

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] }}"
    "{% if not (loop.last and message['role'] == 'assistant' and continue_final_message is defined "
    "and continue_final_message) %}{{ '<|im_end|>\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Enough text for a BPE vocabulary that covers the ReAct format, JSON and some Chinese.
TRAINING_TEXT = """
Thought: I need to search for this. Action: google_search Action Input: {"search_query": "Jay Chou"}
Observation: Jay Chou was born on January 18, 1979. Final Answer: 1979
Thought: I should compute it. Action: calculator Action Input: {"expression": "2**10"} Observation: 1024
Question: What is 12 times 6? Answer the following questions as best you can. You have access to tools.
思考 行动 观察 最终答案 周杰伦 哪年 出生 第一张 专辑 是什么 计算器 搜索
0 1 2 3 4 5 6 7 8 9 + - * / ( ) [ ] { } : , . ? ! " ' = _ \\n
"""


def build_tokenizer(
    vocab_size: int = 512,
    special_tokens: list[str] | None = None,
    eos: str = "<|im_end|>",
    bos: str | None = None,
    pad: str = "<|endoftext|>",
    template: str = CHATML_TEMPLATE,
):
    """A byte-level BPE tokenizer with a family's special tokens (ChatML by default), trained on TRAINING_TEXT."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special_tokens = special_tokens or SPECIAL_TOKENS
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([TRAINING_TEXT] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token=eos,
        pad_token=pad,
        unk_token=None,
        additional_special_tokens=[t for t in special_tokens if t not in (bos, eos, pad)],
    )
    fast.chat_template = template
    return fast


def _open_last(close: str) -> str:
    """Jinja: `close` after a message, unless it is the final assistant message being continued."""
    return (
        "{% if not (loop.last and message['role'] == 'assistant' and continue_final_message is defined "
        "and continue_final_message) %}" + close + "{% endif %}"
    )


# Each family's own chat format, written here (tokens and layout as its instruct models use them).
LLAMA3_TEMPLATE = (
    "{{ '<|begin_of_text|>' }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] }}"
    + _open_last("{{ '<|eot_id|>' }}")
    + "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
MISTRAL_TEMPLATE = (  # no system role: the system message opens the first user turn
    "{{ '<s>' }}{% set system = namespace(text='') %}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set system.text = message['content'] + '\n\n' %}"
    "{% elif message['role'] == 'user' %}{{ '[INST] ' + system.text + message['content'] + ' [/INST]' }}"
    "{% set system.text = '' %}"
    "{% else %}{{ message['content'] }}" + _open_last("{{ '</s>' }}") + "{% endif %}{% endfor %}"
)
GEMMA3_TEMPLATE = (  # roles user / model; the system message is folded into the first user turn
    "{{ '<bos>' }}{% set system = namespace(text='') %}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set system.text = message['content'] + '\n\n' %}"
    "{% else %}{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\n' "
    "+ system.text + message['content'] }}{% set system.text = '' %}"
    + _open_last("{{ '<end_of_turn>\n' }}")
    + "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
PHI3_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] }}"
    + _open_last("{{ '<|end|>\n' }}")
    + "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

SLIDING_WINDOW = 24  # far shorter than an agent prompt, so every later step crosses it

#: family -> (config class, model class, tokenizer kwargs, config kwargs)
FAMILIES = {
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        {
            "special_tokens": [
                "<|begin_of_text|>",
                "<|start_header_id|>",
                "<|end_header_id|>",
                "<|eot_id|>",
                "<|finetune_right_pad_id|>",
            ],
            "bos": "<|begin_of_text|>",
            "eos": "<|eot_id|>",
            "pad": "<|finetune_right_pad_id|>",
            "template": LLAMA3_TEMPLATE,
        },
        {},
    ),
    "qwen2": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        {},
        {  # sliding window on the layers from max_window_layers
            "use_sliding_window": True,
            "sliding_window": SLIDING_WINDOW,
            "max_window_layers": 1,
        },
    ),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}, {"head_dim": 16}),
    "mistral": (
        "MistralConfig",
        "MistralForCausalLM",
        {
            "special_tokens": ["<unk>", "<s>", "</s>"],
            "bos": "<s>",
            "eos": "</s>",
            "pad": "<unk>",
            "template": MISTRAL_TEMPLATE,
        },
        {"sliding_window": SLIDING_WINDOW, "head_dim": 16},
    ),
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {
            "special_tokens": ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"],
            "bos": "<bos>",
            "eos": "<end_of_turn>",
            "pad": "<pad>",
            "template": GEMMA3_TEMPLATE,
        },
        {
            "sliding_window": SLIDING_WINDOW,
            "head_dim": 16,
            "query_pre_attn_scalar": 16,
            "layer_types": ["sliding_attention", "full_attention"],
        },
    ),
    "phi3": (
        "Phi3Config",
        "Phi3ForCausalLM",
        {
            "special_tokens": ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"],
            "eos": "<|end|>",
            "template": PHI3_TEMPLATE,
        },
        {"sliding_window": SLIDING_WINDOW},
    ),
}


def build_tiny_model(
    family: str,
    path: str | Path,
    seed: int = 0,
    hidden_size: int = 64,
    layers: int = 2,
    max_position_embeddings: int = 2048,
    template: str | None = None,
    extra_tokens: list[str] = (),
):
    """Write a randomly initialised tiny chat model of `family` (a key of FAMILIES) to `path`; return the path.
    `template` replaces the family's chat template; `extra_tokens` are more special tokens (tool-call markers)."""
    import torch
    import transformers

    config_name, model_name, tokenizer_kwargs, config_kwargs = FAMILIES[family]
    path = Path(path)
    tokenizer_kwargs = dict(tokenizer_kwargs)
    if template is not None:
        tokenizer_kwargs["template"] = template
    if extra_tokens:
        tokenizer_kwargs["special_tokens"] = [
            *(tokenizer_kwargs.get("special_tokens") or SPECIAL_TOKENS),
            *extra_tokens,
        ]
    tokenizer = build_tokenizer(**tokenizer_kwargs)
    config = getattr(transformers, config_name)(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        **config_kwargs,
    )
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_tiny_llama(
    path: str | Path, seed: int = 0, hidden_size: int = 64, layers: int = 2, max_position_embeddings: int = 2048
):
    """Write a randomly initialised tiny Llama chat model folder (ChatML template) to `path` and return the path."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = Path(path)
    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
