"""The general English corpus the offline tiny bases are pre-trained on.

Real text that installs from PyPI with no hub access: the English Wikipedia articles and the Lee news
corpus (Lee, Pincombe & Welsh 2005: 300 Australian news documents) that ship in gensim's test data
(gensim is pinned, so the files and the corpus hash are fixed). Wiki markup is stripped with gensim's
own ``filter_wiki``. Documents are split into paragraphs; every tenth document (not paragraph) is
held out, so held-out loss measures generalisation rather than recall of neighbouring sentences.
"""

from __future__ import annotations

import bz2
import hashlib
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..infra.cache import cached_dir

# Bump when the extraction below changes what text ends up in the corpus.
CORPUS_FORMAT = 1
HELD_OUT_EVERY = 10  # one document in ten is held out
MIN_PARAGRAPH_CHARS = 80  # drops headings, list stubs and table debris left by markup stripping

_WIKI_FILE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
_NEWS_FILE = "lee_background.cor"


@dataclass(frozen=True)
class Corpus:
    """Paragraphs for training and held-out evaluation, plus the hash that identifies them."""

    train: tuple[str, ...]
    held_out: tuple[str, ...]
    sha256: str


def _gensim_test_data() -> Path:
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the offline corpus needs gensim's test data: pip install gensim==4.4.0")
    return Path(next(iter(spec.submodule_search_locations))) / "test" / "test_data"


def _wiki_documents(path: Path) -> list[str]:
    from gensim.corpora.wikicorpus import extract_pages, filter_wiki

    documents = []
    with bz2.open(path, "rb") as handle:
        for _title, text, _page_id in extract_pages(handle, filter_namespaces=("0",)):
            if not text or text.lstrip().lower().startswith("#redirect"):
                continue
            plain = filter_wiki(text)
            plain = re.sub(r"'{2,}", "", plain)  # bold/italic quotes that filter_wiki keeps
            documents.append(plain)
    return documents


def _paragraphs(document: str) -> list[str]:
    paragraphs = []
    for block in re.split(r"\n\s*\n", document):
        text = " ".join(block.split())
        if len(text) >= MIN_PARAGRAPH_CHARS and not text.startswith(("|", "{", "!", "=", "*")):
            paragraphs.append(text)
    return paragraphs


def _build(out: Path) -> None:
    data = _gensim_test_data()
    documents = _wiki_documents(data / _WIKI_FILE)
    documents += (data / _NEWS_FILE).read_text(encoding="utf-8").splitlines()
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as handle:
        for index, document in enumerate(documents):
            split = "held_out" if index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else "train"
            for paragraph in _paragraphs(document):
                handle.write(json.dumps({"split": split, "text": paragraph}) + "\n")


def load_corpus(build: bool = True) -> Corpus | None:
    """The corpus, extracted once into the cache (a few seconds) and read back from there (None if it is
    not extracted yet and ``build`` is False)."""
    key = {"format": CORPUS_FORMAT, "source": "gensim-4.4.0", "files": [_WIKI_FILE, _NEWS_FILE]}
    folder = cached_dir("corpus", "general-english", key, _build if build else None)
    if folder is None:
        return None
    path = folder / "corpus.jsonl"
    train: list[str] = []
    held_out: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        (held_out if row["split"] == "held_out" else train).append(row["text"])
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return Corpus(tuple(train), tuple(held_out), digest)
