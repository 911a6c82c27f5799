"""The terms text is indexed and searched by, in English and Chinese (and the other CJK scripts).

Latin words are lower-cased, stop words dropped and a plural `s` cut; CJK runs, which have no spaces, give
character unigrams and bigrams. Measured against jieba's words (bench/search_engines.py, bench/README.md):
as good on the dev questions, with no dictionary to load and nothing to install.
"""

from __future__ import annotations

import re
import unicodedata

#: Names the tokenisation: an index written with another is rebuilt.
TOKENIZER = "bigram-1"

_CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKENS = re.compile(rf"([{_CJK_CHARS}]+)|([^\W_{_CJK_CHARS}]+)")
_EN_STOPWORDS = frozenset(
    "a an the of in on at to for from by with and or is are was were be been being it its this that "
    "these those what which who whom whose when where why how do does did has have had i you he she "
    "we they his her their our my your me him them s as into about than then there".split()
)
_ZH_STOP_SPLIT = re.compile("[的了是在和与吗呢吧啊哪什么谁]+")  # function characters: no unigram, no bigram


def normalize(text: str) -> str:
    """NFKC (full-width letters and digits to ASCII) and case folding: the form that is compared."""
    return unicodedata.normalize("NFKC", text).casefold()


def tokenize(text: str) -> list[str]:
    """Index terms: lower-cased Latin words (plural `s` dropped, stop words removed) and,
    for Chinese / Japanese / Korean runs, which have no spaces, character unigrams and bigrams."""
    terms: list[str] = []
    for cjk, word in _TOKENS.findall(normalize(text)):
        if cjk:
            for piece in _ZH_STOP_SPLIT.split(cjk):
                terms += list(piece) + [piece[i : i + 2] for i in range(len(piece) - 1)]
        elif word not in _EN_STOPWORDS:
            terms.append(word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word)
    return terms
