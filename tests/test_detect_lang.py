"""detect_lang picks the Chinese prompt for Chinese text only: real sentences in five shapes."""

from __future__ import annotations

import pytest

from tinyagent.text import detect_lang

CHINESE = [
    "周杰伦哪年出生？",
    "用Python写一个快速排序",
    "什么是machine learning？",
    "请解释 Transformer 中的 self-attention 机制",
    "GPT-4是哪家公司发布的？",
    "北京到上海的高铁要多久",
]
ENGLISH = [
    "Which year was Jay Chou born?",
    "What does the character 水 mean?",
    "How do you write 'thank you' in Chinese (谢谢)?",
    "Tell me about 周杰伦's most famous album.",
    "",
]
JAPANESE = [
    "日本の首都はどこですか？",
    "東京は？",
    "経済産業省は新しい政策を発表した。",
    "ポケモンの最初のゲームはいつ発売されましたか",
]
KOREAN = ["대한민국의 수도는 어디입니까?", "大韓民國의 首都는 서울이다"]


@pytest.mark.parametrize("text", CHINESE)
def test_chinese_text_gets_the_chinese_prompt(text):
    assert detect_lang(text) == "zh"


@pytest.mark.parametrize("text", ENGLISH)
def test_english_text_quoting_han_characters_stays_english(text):
    assert detect_lang(text) == "en"


@pytest.mark.parametrize("text", JAPANESE + KOREAN)
def test_japanese_and_korean_do_not_get_the_chinese_prompt(text):
    assert detect_lang(text) == "en"
