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


def build_tokenizer(vocab_size: int = 512):
    """A byte-level BPE tokenizer with ChatML special tokens, trained on TRAINING_TEXT."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator([TRAINING_TEXT] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        unk_token=None, additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_tiny_llama(path: str | Path, seed: int = 0, hidden_size: int = 64, layers: int = 2,
                     max_position_embeddings: int = 2048):
    """Write a randomly initialised tiny Llama chat model folder to `path` and return the path."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = Path(path)
    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=None, eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
