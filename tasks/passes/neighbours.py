"""Neighbour texts for the neighbourhood attack, proposed by a small masked LM.

Mattern et al. (https://arxiv.org/abs/2305.18462) make each neighbour by swapping a word for a masked
LM's likely substitute. Here each of a text's ``k`` neighbours masks a fresh random ``mask_fraction`` of
its tokens (at least one) and fills every masked position with the masked LM's most likely token other
than the original and the special tokens, all neighbours of a batch in one forward pass. The masked LM is
the offline tiny one (``privauditor prepare`` builds it), sharing the bases' tokenizer.

Neighbours depend only on the texts, ``k``, ``mask_fraction``, the masked LM and the seed, so they are
generated once per dataset split and shared by every cell (:func:`cached_neighbours`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..infra.cache import file_lock, stable_hash
from ..infra.deadline import check
from ..infra.files import read_table, write_table

NEIGHBOURS_FORMAT = 2  # 2: keyed by the masked LM's weights, not its cache folder


def load_masked_lm(path: Path | None = None):
    """The masked LM and its tokenizer (default: the cached offline tiny masked LM)."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from ..models._tiny import masked_lm_dir

    path = path or masked_lm_dir()
    return AutoModelForMaskedLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def generate_neighbours(
    texts: Sequence[str],
    k: int,
    mask_fraction: float,
    seed: int,
    masked_lm=None,
    batch_size: int = 64,
) -> list[list[str]]:
    """``k`` neighbour texts for each of ``texts`` (same order); deterministic for a seed."""
    import torch

    model, tokenizer = masked_lm or load_masked_lm()
    limit = model.config.max_position_embeddings
    head = getattr(model, "cls", None) or model.lm_head  # BERT-style / RoBERTa-style masked-LM heads
    special = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
    jobs: list[tuple[list[int], np.ndarray]] = []
    for index, text in enumerate(texts):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][:limit]
        rng = np.random.default_rng([seed, index])
        count = max(1, round(mask_fraction * len(ids)))
        for _ in range(k):
            jobs.append((ids, rng.choice(len(ids), size=min(count, len(ids)), replace=False)))
    out: list[str] = []
    with torch.inference_mode():
        for start in range(0, len(jobs), batch_size):
            check("neighbour generation")
            chunk = jobs[start : start + batch_size]
            width = max(len(ids) for ids, _ in chunk)
            original = torch.full((len(chunk), width), tokenizer.pad_token_id, dtype=torch.long)
            attention = torch.zeros_like(original)
            for row, (ids, _) in enumerate(chunk):
                original[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
                attention[row, : len(ids)] = 1
            masked = torch.zeros_like(original, dtype=torch.bool)
            for row, (_, positions) in enumerate(chunk):
                masked[row, torch.as_tensor(positions, dtype=torch.long)] = True
            inputs = original.masked_fill(masked, tokenizer.mask_token_id)
            hidden = model.base_model(input_ids=inputs, attention_mask=attention)[0][masked]
            logits = head(hidden).float()  # the vocabulary projection only where something is masked
            logits[:, special] = float("-inf")
            logits.scatter_(1, original[masked][:, None], float("-inf"))
            filled = original.clone()
            filled[masked] = logits.argmax(-1)
            for row, (ids, _) in enumerate(chunk):
                out.append(tokenizer.decode(filled[row, : len(ids)].tolist()))
    return [out[i * k : (i + 1) * k] for i in range(len(texts))]


def cached_neighbours(
    root: Path,
    sample_ids: Sequence[str],
    texts: Sequence[str],
    k: int,
    mask_fraction: float,
    seed: int,
    masked_lm_path: Path | None = None,
) -> dict[str, list[str]]:
    """Neighbours by sample id, read from ``root`` or generated once and stored there (Parquet), keyed by
    the texts, ``k``, ``mask_fraction``, the seed, and the masked LM's weights (the offline one unless
    ``masked_lm_path`` names another)."""
    from .. import models

    path_mlm = Path(masked_lm_path or models.masked_lm_path())
    key = {
        "texts": stable_hash([list(sample_ids), list(texts)], 64),
        "k": k,
        "mask_fraction": mask_fraction,
        "seed": seed,
        "masked_lm": models.checkpoint_identity(path_mlm),
        "format": NEIGHBOURS_FORMAT,
    }
    path = Path(root) / f"{stable_hash(key, 16)}.parquet"
    if not path.exists():
        with file_lock(path.with_suffix(".lock")):
            if not path.exists():
                lists = generate_neighbours(texts, k, mask_fraction, seed, load_masked_lm(path_mlm))
                table = pa.table(
                    {
                        "sample_id": pa.array(list(sample_ids)),
                        "neighbours": pa.array(lists, pa.list_(pa.string())),
                    }
                )
                write_table(table, path)
    table = read_table(path)
    return dict(
        zip(table.column("sample_id").to_pylist(), table.column("neighbours").to_pylist(), strict=True)
    )
