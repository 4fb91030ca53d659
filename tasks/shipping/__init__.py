"""Shipped forms of an adapted model: what practitioners serve instead of the float model they trained.

- ``merged``: the adapter folded into the base's weights (peft's ``merge_and_unload``): the same function
  to float tolerance, one plain model (:mod:`.merge`);
- ``int8``: the merged model with every linear layer dynamically quantised to int8 (torch's
  ``quantize_dynamic``, CPU; GPT-2's ``Conv1D`` layers as the linear layers they are) (:mod:`.int8`);
- ``gguf-q8_0`` and ``gguf-q4``: the merged model written to a GGUF file by the ``gguf`` package's writer,
  its matrices quantised by the package's own quantiser (Q8_0; Q4_0 for ``gguf-q4``: of the 4-bit types,
  the ``gguf`` package quantises Q4_0 and Q4_1 in Python, the K-quants only dequantise), then read back
  by transformers' GGUF reader, the one the packaged real base goes through (:mod:`.gguf_file`).

Techniques without a merge (prompt learning, LLaMA-Adapter, the bottleneck adapters) cannot ship in one
file of the base's architecture: every form refuses them with the reason, as it refuses a family that
transformers' GGUF reader cannot read (OPT, GPT-J) for the GGUF forms.

Example::

    shipped, record = ship("gguf-q8_0", model, technique, "llama", work_dir)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..infra.errors import PrivauditorError
from .merge import MERGEABLE, PLAIN, merged

FORMS = ("merged", "int8", "gguf-q8_0", "gguf-q4")
#: families transformers' GGUF reader reads (its GGUF_SUPPORTED_ARCHITECTURES, the gguf package's names)
GGUF_FAMILIES = frozenset({"llama", "gpt2", "bloom", "t5"})


def unsupported_reason(form: str, technique: str, family: str) -> str | None:
    """Why ``technique`` on ``family`` cannot ship as ``form`` (None: it can)."""
    if form not in FORMS:
        raise PrivauditorError(f"unknown shipped form {form!r}: choose one of {', '.join(FORMS)}")
    if technique not in PLAIN | MERGEABLE:
        return (f"{technique} cannot be merged into the base's weights (it is not one model of the base's "
                "architecture), so it has no shipped form")  # fmt: skip
    if form.startswith("gguf") and family not in GGUF_FAMILIES:
        return f"transformers' GGUF reader cannot read the {family} architecture"
    return None


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
    plain = merged(model, technique)
    if form == "merged":
        return plain, {"form": form}
    if form == "int8":
        from .int8 import dynamic_int8

        return dynamic_int8(plain)
    from .gguf_file import round_trip

    return round_trip(plain, family, form, work_dir, tokenizer)
