"""``token_frequency``: per scored text, how frequent each of its target tokens is in a reference corpus.

DC-PDD (Zhang et al. 2024) calibrates a token's probability by its frequency in a large general corpus.
The table is token counts of ``corpus`` under the target's tokenizer (each document cut at 1,024 tokens,
as the DC-PDD code does), Laplace-smoothed: f(t) = (1 + count(t)) / (total + vocabulary size); per scored
text, f of each target token the ``signals`` view scores. ``corpus``: None takes the offline tiny bases'
pre-training corpus (real English text; right for those bases); for a real model name a corpus close
to its pre-training data: a ``.txt`` file (one document per line), a ``.jsonl`` file (a ``text`` field
per line), or a ``.json`` file of token counts (``{"<token id>": count}``) computed elsewhere with the
same tokenizer. Counts are cached per (corpus content, tokenizer). No pass through any model.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..infra.errors import PrivauditorError
from . import VIEWS, build_view
from ._base import Cost, View

MAX_TOKENS = 1024  # tokens counted per document (the DC-PDD code's truncation)


@VIEWS.register("token_frequency")
@dataclass(frozen=True)
class TokenFrequencyView(View):
    """Smoothed reference-corpus frequency of every scored target token."""

    corpus: str | None = None  # None: the offline pre-training corpus; else a .txt / .jsonl / .json file

    name = "token_frequency"
    version = 1

    def __post_init__(self) -> None:
        if self.corpus is not None and Path(self.corpus).suffix not in (".txt", ".jsonl", ".json"):
            raise PrivauditorError(
                f"view 'token_frequency': corpus must be a .txt, .jsonl or .json file, not {self.corpus!r}"
            )

    def cost(self) -> Cost:
        return Cost()

    def identity(self, build: bool) -> dict[str, str | None]:
        if self.corpus is None:
            from ..models._corpus import load_corpus

            corpus = load_corpus(build)
            return {"corpus": None if corpus is None else corpus.sha256}
        path = Path(self.corpus)
        if not path.is_file():
            raise PrivauditorError(f"view 'token_frequency': corpus file {self.corpus} does not exist")
        return {"corpus": hashlib.sha256(path.read_bytes()).hexdigest()}

    def compute(self, context):
        import numpy as np
        import pyarrow as pa

        signals = context.get(build_view("signals"))
        tokenizer = context.scorer("target").tokenizer
        counts = corpus_counts(self, tokenizer, context.identities["target"].tokenizer)
        smoothed = (1.0 + counts) / (counts.sum() + len(counts))
        rows = [smoothed[np.asarray(ids, dtype=np.int64)].tolist() for ids in signals.token_ids]
        return pa.table(
            {
                "sample_id": pa.array(signals.sample_id, pa.string()),
                "frequency": pa.array(rows, pa.list_(pa.float64())),
            }
        )

    def read(self, table):
        import numpy as np

        return [np.asarray(row, dtype=np.float64) for row in table.column("frequency").to_pylist()]


def corpus_counts(view: TokenFrequencyView, tokenizer, tokenizer_identity: str):
    """Token counts of the view's corpus under ``tokenizer`` (a float64 array over the vocabulary), built
    once per (corpus content, tokenizer) in the artefact cache."""
    import numpy as np

    from ..infra.cache import cached_dir

    vocabulary = len(tokenizer)

    def build(folder: Path) -> None:
        counts = np.zeros(vocabulary, dtype=np.float64)
        if view.corpus is not None and view.corpus.endswith(".json"):
            for token, count in json.loads(Path(view.corpus).read_text()).items():
                if not 0 <= int(token) < vocabulary:
                    raise PrivauditorError(f"{view.corpus}: token id {token} is outside the vocabulary")
                counts[int(token)] += float(count)
        else:
            for start in range(0, len(documents := _documents(view.corpus)), 256):
                batch = tokenizer(documents[start : start + 256], add_special_tokens=False)["input_ids"]
                for ids in batch:
                    np.add.at(counts, np.asarray(ids[:MAX_TOKENS], dtype=np.int64), 1.0)
        if counts.sum() == 0:
            raise PrivauditorError(
                f"view 'token_frequency': the corpus {view.corpus or '(offline)'} is empty"
            )
        np.save(folder / "counts.npy", counts)

    key = {"corpus": view.identity(True)["corpus"], "tokenizer": tokenizer_identity, "max_tokens": MAX_TOKENS}
    return np.load(cached_dir("frequencies", "tokens", key, build) / "counts.npy")


def _documents(corpus: str | None) -> list[str]:
    if corpus is None:
        from ..models._corpus import load_corpus

        loaded = load_corpus()
        return [*loaded.train, *loaded.held_out]
    lines = Path(corpus).read_text(encoding="utf-8").splitlines()
    if corpus.endswith(".jsonl"):
        return [json.loads(line)["text"] for line in lines if line.strip()]
    return [line for line in lines if line.strip()]
