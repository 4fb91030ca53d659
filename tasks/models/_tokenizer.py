"""The byte-level BPE tokenizer shared by every offline tiny base and the masked LM.

Trained locally on the corpus's training paragraphs with ``tokenizers``. A vocabulary of 4k keeps the
output projection — which dominates a tiny model's cost — small (a 50k vocabulary made a 2-layer model
about 5x slower on a 2-core CPU) while leaving words of the domain datasets mostly whole.
Byte-level, so no text is ever out of vocabulary.
"""

from __future__ import annotations

from pathlib import Path

from ..infra.cache import cached_dir
from ._corpus import Corpus

TOKENIZER_FORMAT = 1
VOCAB_SIZE = 4096
SPECIAL_TOKENS = {
    "pad_token": "<pad>",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "mask_token": "<mask>",
}


def tokenizer_dir(corpus: Corpus, vocab_size: int = VOCAB_SIZE, build: bool = True) -> Path | None:
    """The cached tokenizer directory (``PreTrainedTokenizerFast`` files), trained if missing (None
    instead when ``build`` is False)."""

    def train(out: Path) -> None:
        from tokenizers import ByteLevelBPETokenizer
        from transformers import PreTrainedTokenizerFast

        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(
            corpus.train, vocab_size=vocab_size, min_frequency=2, special_tokens=list(SPECIAL_TOKENS.values())
        )
        fast = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, **SPECIAL_TOKENS)
        fast.model_max_length = 1_000_000  # the model's own position limit applies, not the tokenizer's
        fast.save_pretrained(out)

    key = {
        "format": TOKENIZER_FORMAT,
        "corpus": corpus.sha256,
        "vocab_size": vocab_size,
        "specials": SPECIAL_TOKENS,
    }
    return cached_dir("tokenizer", f"bpe{vocab_size}", key, train if build else None)
