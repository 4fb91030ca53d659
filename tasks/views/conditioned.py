"""``conditioned``: the target's mean NLL on each scored text with other records in front of it.

ReCaLL (Xie et al. 2024) and Con-ReCaLL (Wang et al. 2024) condition a text on a prefix P of records of
known membership and compare with the unconditioned likelihood. P is ``shots`` records of one split part
(``population``: known non-members; ``known_members``: known members), each written as the model sees a
record in training (prompt, then target) and followed by a newline, concatenated in the part's order.

Where P goes: in front of the text's own prompt. A causal model reads ``<bos> P prompt target``; T5 reads
``P prompt`` on the encoder side and the target alone on the decoder side; under prompt, prefix or
P-tuning the learned virtual tokens stay first, before P. The scored positions are the target's alone and
exactly the ones the unconditioned ``signals`` view scores (its token ids, truncated at the same length),
so the two likelihoods compare the same tokens. Shots that would push a text past the model's context are
dropped from the front of P, the rule of the ReCaLL code; the number kept is stored with the table
(metadata key ``privauditor.shots``).

Deviations from the authors' code: it joins raw records with nothing (ruoyuxie/recall @ c2316410,
``src/run.py`` line 107, ``"".join(prefix)``; WangCheng0116/CON-RECALL @ 8c2bb7e6, ``run.py`` lines
100-101), where P here writes each record as trained (prompt, then target) and ends it with a newline,
so that records stay apart; its code also tokenises prefix and text apart and concatenates the ids
(``src/run.py`` lines 75-78), where here P goes in front of the text's prompt as above.

``rows="held_out"`` scores, instead of the scored texts, the records of ``population`` and
``known_members`` that no prefix holds (each part past its first ``shots``), with their membership and
their unconditioned NLL: labelled texts outside the scored ones, on which Con-ReCaLL picks its γ. Its
``read`` gives a :class:`HeldOut`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from ..infra.errors import PrivauditorError
from . import VIEWS, build_view
from ._base import Cost, View

SHOTS_METADATA = b"privauditor.shots"
PREFIX_PARTS = ("population", "known_members")


class _Plain(NamedTuple):
    token_ids: list
    member: object
    nll: object


class HeldOut(NamedTuple):
    """Held-out labelled texts: membership, unconditioned and conditioned mean NLL (float64 arrays)."""

    member: object
    nll: object
    conditioned_nll: object


@VIEWS.register("conditioned")
@dataclass(frozen=True)
class ConditionedView(View):
    """Per scored text, the target's mean NLL on its target tokens with ``shots`` records of ``part``
    in front."""

    part: Literal["population", "known_members"] = "population"
    shots: int = 12  # records in the prefix (ReCaLL's code's default)
    rows: Literal["scored", "held_out"] = "scored"  # the texts scored under the prefix

    name = "conditioned"
    version = 1

    def __post_init__(self) -> None:
        if self.part not in PREFIX_PARTS:
            raise PrivauditorError(
                f"view 'conditioned': part must be population or known_members, not {self.part!r}"
            )
        if not isinstance(self.shots, int) or self.shots < 1:
            raise PrivauditorError(f"view 'conditioned': shots must be a positive int, not {self.shots!r}")
        if self.rows not in ("scored", "held_out"):
            raise PrivauditorError(f"view 'conditioned': rows must be scored or held_out, not {self.rows!r}")

    def parts(self) -> tuple[str, ...]:
        return ("scored", self.part) if self.rows == "scored" else PREFIX_PARTS

    def needs(self) -> dict[str, int]:
        if self.rows == "scored":
            return {self.part: 1}
        return {part: self.shots + 1 for part in PREFIX_PARTS}  # one record past the prefix at least

    def cost(self) -> Cost:
        # held out: per held-out text, its pass under the prefix and its plain one (the part's signals)
        return Cost(forward=1 if self.rows == "scored" else 2)

    def compute(self, context):
        import numpy as np
        import pyarrow as pa

        from ..passes.adapted import virtual_tokens

        examples, plain = self._texts(context)  # plain: the unconditioned signals, whose positions to keep
        target = context.scorer("target")
        tokenizer, model = target.tokenizer, target.model
        records = [f"{e.prompt}{e.target}\n" for e in context.examples(self.part)[: self.shots]]
        lengths = [len(ids) for ids in tokenizer(records, add_special_tokens=False)["input_ids"]]
        prompts = tokenizer([e.prompt for e in examples], add_special_tokens=False)["input_ids"]
        longest = max(2 + len(p) + len(ids) for p, ids in zip(prompts, plain.token_ids, strict=True))
        # <bos>/<eos>, in-context demonstrations, prompt, target
        room = _context(model, target.seq2seq) - virtual_tokens(model) - target.context_tokens - longest
        kept = len(records)
        while kept and sum(lengths[len(records) - kept :]) > room:
            kept -= 1  # drop shots from the front of the prefix
        if not kept:
            raise PrivauditorError(
                f"view 'conditioned': not one record of {self.part} fits in front of the texts within the "
                f"model's context; lower train.max_length"
            )
        prefix = "".join(records[len(records) - kept :])
        stats = target.score(
            examples, context.max_length, context.batch_size, False, [prefix] * len(examples)
        )
        nll = []
        for stat, ids in zip(stats, plain.token_ids, strict=True):
            if not np.array_equal(stat.token_ids, ids):
                raise PrivauditorError("view 'conditioned': the prefix changed how a target tokenizes")
            nll.append(-float(np.mean(stat.logp, dtype=np.float64)))
        columns = {
            "sample_id": pa.array([e.sample_id for e in examples], pa.string()),
            "conditioned_nll": pa.array(nll, pa.float64()),
        }
        if self.rows == "held_out":
            columns |= {
                "member": pa.array(plain.member, pa.bool_()),
                "nll": pa.array(plain.nll, pa.float64()),
            }
        return pa.table(columns).replace_schema_metadata({SHOTS_METADATA: str(kept).encode()})

    def _texts(self, context):
        """The texts to score and their unconditioned signals (all of each part's, or those past the
        prefix's records)."""
        import numpy as np

        if self.rows == "scored":
            return context.examples(), context.get(build_view("signals"))
        held = [context.get(build_view("signals", {"part": part})) for part in PREFIX_PARTS]
        plain = _Plain(
            [ids for s in held for ids in s.token_ids[self.shots :]],
            np.concatenate([s.member[self.shots :] for s in held]),
            np.concatenate([s.nll[self.shots :] for s in held]),
        )
        return [e for part in PREFIX_PARTS for e in context.examples(part)[self.shots :]], plain

    def read(self, table):
        import numpy as np

        conditioned = np.asarray(table.column("conditioned_nll").to_pylist(), dtype=np.float64)
        if self.rows == "scored":
            return conditioned
        member = np.asarray(table.column("member").to_pylist(), dtype=bool)
        return HeldOut(member, np.asarray(table.column("nll").to_pylist(), dtype=np.float64), conditioned)


def _context(model, seq2seq: bool) -> int:
    """Positions a text may take: the model's learned positions (T5's relative ones have no limit; its
    own default of 512 is used)."""
    config = model.config
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return 512 if seq2seq or positions is None else int(positions)
