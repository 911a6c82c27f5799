"""InternLM2's sentencepiece tokenizer, loaded without the checkpoint's remote code.

Text between special tokens is encoded by sentencepiece exactly as the original tokenizer does;
the special tokens, their ids, and whether a BOS token is prepended come from the checkpoint's
tokenizer_config.json (and special_tokens_map.json), not from constants here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar


def _content(value) -> str | None:
    """A special token entry as a string ("<s>" or {"content": "<s>", ...})."""
    return value.get("content") if isinstance(value, dict) else value


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def load_internlm2_tokenizer(folder: str | Path):
    """The tokenizer of an InternLM2 checkpoint folder (tokenizer.model + tokenizer_config.json)."""
    from transformers import AddedToken, SentencePieceBackend

    class InternLM2Tokenizer(SentencePieceBackend):
        """sentencepiece between special tokens; decoding joins sentencepiece's text of each run."""

        vocab_files_names: ClassVar[dict] = {"vocab_file": "tokenizer.model"}
        model_input_names: ClassVar[list] = ["input_ids", "attention_mask"]

        def convert_tokens_to_string(self, tokens: list[str]) -> str:
            special = self.added_tokens_encoder.keys() | set(self.all_special_tokens)
            parts, run = [], []
            for token in tokens:
                if token in special:
                    parts += [self.sp_model.decode_pieces(run), token]
                    run = []
                else:
                    run.append(token)
            parts.append(self.sp_model.decode_pieces(run))
            return "".join(parts)

    folder = Path(folder)
    model_file = folder / "tokenizer.model"
    if not model_file.is_file():
        raise FileNotFoundError(f"{folder} has no tokenizer.model (InternLM2's sentencepiece tokenizer)")
    config = _read_json(folder / "tokenizer_config.json")
    special_map = _read_json(folder / "special_tokens_map.json")
    names = {}
    for key, default in (("bos_token", "<s>"), ("eos_token", "</s>"), ("unk_token", "<unk>"), ("pad_token", None)):
        names[key] = _content(config.get(key)) or _content(special_map.get(key)) or default
    added = {
        int(index): AddedToken(
            entry["content"],
            special=entry.get("special", True),
            lstrip=entry.get("lstrip", False),
            rstrip=entry.get("rstrip", False),
            normalized=entry.get("normalized", False),
            single_word=entry.get("single_word", False),
        )
        for index, entry in config.get("added_tokens_decoder", {}).items()
    }
    extra = [
        _content(t)
        for t in config.get("additional_special_tokens") or special_map.get("additional_special_tokens") or []
    ]
    extra += [t.content for t in added.values() if t.special and t.content not in extra]
    extra = [t for t in extra if t not in names.values()]
    add_bos, add_eos = config.get("add_bos_token", True), config.get("add_eos_token", False)
    pattern = {(True, False): "bos", (True, True): "bos_eos", (False, True): "eos"}.get((add_bos, add_eos), "none")
    tokenizer = InternLM2Tokenizer(
        vocab_file=str(model_file),
        added_tokens_decoder=added,
        extra_special_tokens=extra,
        special_tokens_pattern=pattern,
        clean_up_tokenization_spaces=False,
        **names,
    )
    for index, token in added.items():
        if tokenizer.convert_tokens_to_ids(token.content) != index:
            raise ValueError(
                f"{folder}: special token {token.content!r} should have id {index}, "
                f"but the tokenizer gives {tokenizer.convert_tokens_to_ids(token.content)}"
            )
    return tokenizer
