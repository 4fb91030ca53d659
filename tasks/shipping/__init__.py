"""Shipped forms of an adapted model: what practitioners serve instead of the float model they trained.

- ``merged``: the adapter folded into the base's weights (peft's ``merge_and_unload``): the same function
  to float tolerance, one plain model (:mod:`.merge`);
- ``int8``: the merged model with every linear layer dynamically quantised to int8 (torch's
  ``quantize_dynamic``, CPU; GPT-2's ``Conv1D`` layers as the linear layers they are) (:mod:`.int8`);
- ``gguf-q8_0`` and ``gguf-q4``: the merged model written to a GGUF file by the ``gguf`` package's writer,
  its matrices quantised by the package's own quantiser (Q8_0; Q4_0 for ``gguf-q4``: of the 4-bit types,
  the ``gguf`` package quantises Q4_0 and Q4_1 in Python, the K-quants only dequantise), then read back
  by transformers' GGUF reader, the one the packaged real base goes through (:mod:`.gguf_file`);
- ``nf4``: the merged model loaded by bitsandbytes with 4-bit NormalFloat linear layers (CUDA only:
  refused with the reason where bitsandbytes or a GPU is missing) (:mod:`.nf4`).

Techniques without a merge (prompt learning, LLaMA-Adapter, the bottleneck adapters) ship unmerged: the
base's weights (every frozen parameter) in the form, the adapter's own in float (:mod:`.unmerged`), so
``merged`` has nothing to do for them and refuses them, as the GGUF forms refuse a family that
transformers' GGUF reader cannot read (OPT, GPT-J).

Example::

    shipped, record = ship("gguf-q8_0", model, technique, "llama", work_dir)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..infra.errors import PrivauditorError
from .merge import MERGEABLE, PLAIN, merged

FORMS = ("merged", "int8", "gguf-q8_0", "gguf-q4", "nf4")
#: bumped whenever a change to a form alters what it ships (part of the cell id with ``score.shipped``)
VERSION = 1
#: families transformers' GGUF reader reads (its GGUF_SUPPORTED_ARCHITECTURES, the gguf package's names)
GGUF_FAMILIES = frozenset({"llama", "gpt2", "bloom", "t5"})


def check_forms(forms: tuple[str, ...]) -> tuple[str, ...]:
    """``forms`` as given (``score.shipped``), or a one-line error naming an unknown or repeated one."""
    for form in forms:
        if form not in FORMS:
            raise PrivauditorError(f"score.shipped: unknown form {form!r}: choose from {', '.join(FORMS)}")
    if len(set(forms)) < len(forms):
        raise PrivauditorError(f"score.shipped names a form twice: {list(forms)}")
    return forms


def unsupported_reason(form: str, technique: str, family: str) -> str | None:
    """Why ``technique`` on ``family`` cannot ship as ``form`` (None: it can)."""
    check_forms((form,))
    if form == "merged" and technique not in PLAIN | MERGEABLE:
        return f"{technique} has no merge: it ships unmerged, as trained"
    if form == "nf4":
        from .nf4 import missing

        return missing() or (
            None if technique in PLAIN | MERGEABLE else f"nf4 of an unmerged {technique}: not built"
        )
    if form.startswith("gguf") and family not in GGUF_FAMILIES:
        return f"transformers' GGUF reader cannot read the {family} architecture"
    return None


def as_trained(form: str, technique: str) -> bool:
    """Whether ``form`` of ``technique`` is the trained model itself (a plain model's ``merged``): a sweep
    leaves it out, as it would only repeat the trained model's numbers."""
    return form == "merged" and technique in PLAIN


def ship(
    form: str, model: Any, technique: str, family: str, work_dir: Path, tokenizer: Any = None
) -> tuple[Any, dict[str, Any]]:
    """``model`` (adapted by ``technique`` on a ``family`` base, left untouched) as ``form``: the shipped
    model, in eval mode, and what was done (``form``, and per form its details). A GGUF form's file is
    ``work_dir/<form>.gguf``, with ``tokenizer`` in it where one is given (then it stands alone, as
    ``privauditor audit --model FILE.gguf`` reads it)."""
    reason = unsupported_reason(form, technique, family)
    if reason is not None:
        raise PrivauditorError(f"cannot ship as {form}: {reason}")
    if technique not in PLAIN | MERGEABLE:
        from .unmerged import base_shipped

        return base_shipped(form, model, family)
    plain = merged(model, technique)
    if form == "merged":
        return plain, {"form": form}
    if form == "int8":
        from .int8 import dynamic_int8

        return dynamic_int8(plain)
    if form == "nf4":
        from .nf4 import nf4

        return nf4(plain, work_dir)
    from .gguf_file import round_trip

    return round_trip(plain, family, form, work_dir, tokenizer)
