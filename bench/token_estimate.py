"""text.estimate_tokens against real tokenizers: the embedded SmolLM2's and, when given, another GGUF
model's (docs/measurements.md, "Token estimates"). The estimate should never be under the real count.

    python bench/token_estimate.py [--gguf PATH_TO.gguf]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tinyagent.format.prompts import build_system_prompt
from tinyagent.models.embedded import embedded_gguf_path
from tinyagent.text import estimate_tokens
from tinyagent.tools import Calculator

ROOT = Path(__file__).resolve().parent.parent


def texts() -> dict[str, str]:
    corpus = [json.loads(line) for line in (ROOT / "tinyagent" / "data" / "corpus.jsonl").open(encoding="utf-8")]
    chinese = [d["text"] for d in corpus if any("\u4e00" <= c <= "\u9fff" for c in d["text"])]
    return {
        "README": (ROOT / "README.md").read_text(encoding="utf-8"),
        "agent/loop.py": (ROOT / "tinyagent" / "agent" / "loop.py").read_text(encoding="utf-8"),
        "corpus en": "\n".join(d["text"] for d in corpus if d["text"] not in chinese),
        "corpus zh": "\n".join(chinese),
        "json": json.dumps(corpus[:40], ensure_ascii=False),
        "system prompt zh": build_system_prompt([Calculator()], "zh"),
    }


def main() -> None:
    from transformers import AutoTokenizer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, action="append", default=[], help="another tokenizer's GGUF file")
    args = parser.parse_args()
    files = [embedded_gguf_path(), *args.gguf]
    tokenizers = {f.name: AutoTokenizer.from_pretrained(str(f.parent), gguf_file=f.name) for f in files}
    print(
        f"{'text':18} {'chars':>7} {'estimate':>8}  " + "  ".join(f"{n[:24]:>24} {'est/real':>8}" for n in tokenizers)
    )
    for name, text in texts().items():
        estimate = estimate_tokens(text)
        cells = []
        for tokenizer in tokenizers.values():
            real = len(tokenizer(text)["input_ids"])
            cells.append(f"{real:>24} {estimate / real:>8.2f}")
        print(f"{name:18} {len(text):>7} {estimate:>8}  " + "  ".join(cells))


if __name__ == "__main__":
    main()
