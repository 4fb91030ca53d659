"""Corporate climate-policy statements with their stance (support / oppose / neutral).

Real dataset: the climate stance set of TweetEval, `cardiffnlp/tweet_eval
<https://huggingface.co/datasets/cardiffnlp/tweet_eval>`_ config ``stance_climate`` (columns ``text``
and ``label``: 0 none, 1 against, 2 favor; Barbieri et al., 2020, https://arxiv.org/abs/2010.12421),
standing in for the climate-policy stance set of the PrivAuditor benchmark. Its integer labels are
rendered as the words ``neutral`` / ``oppose`` / ``support``.

The offline version generates statements by fake companies (Faker) from several sectors, quoting named
executives, with years and percentages, about one of several policies (carbon pricing, emissions
targets, renewable mandates, vehicle standards, methane rules, ...), worded to match the stance. Offline
records also carry the optional ``company`` and ``policy`` fields.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from . import DATASETS
from ._base import DatasetPlugin

# Labels of the real set (TweetEval stance: 0 none, 1 against, 2 favor), as ints, digit strings or words.
_STANCES = {
    "0": "neutral",
    "1": "oppose",
    "2": "support",
    "none": "neutral",
    "against": "oppose",
    "favor": "support",
}

# policy: (how a statement names it, the figures {x} may take)
_POLICIES = {
    "carbon pricing": ("a carbon price of ${x} per tonne of CO2", (25, 40, 50, 65, 80, 100, 130, 150)),
    "emissions targets": (
        "a binding target to cut emissions {x}% below 2005 levels",
        (30, 40, 50, 55, 65, 80),
    ),
    "renewable mandates": (
        "a mandate for utilities to source {x}% of power from renewables",
        (30, 40, 50, 70, 100),
    ),
    "vehicle emission standards": (
        "tailpipe standards requiring {x}% of new car sales to be electric",
        (35, 50, 67, 100),
    ),
    "methane rules": (
        "rules requiring oil and gas operators to cut methane leaks by {x}%",
        (30, 45, 65, 75, 80),
    ),
    "coal phase-out": ("a phase-out of coal-fired power within {x} years", (5, 8, 10, 12, 15, 20)),
    "climate disclosure": (
        "mandatory disclosure of Scope 3 emissions for firms above {x} employees",
        (250, 500, 1000),
    ),
    "border carbon adjustment": (
        "a border carbon adjustment on steel, cement and aluminium imports from {x}",
        (2026, 2027, 2030),
    ),
}
_SECTORS = (
    "utility",
    "automaker",
    "oil and gas producer",
    "steelmaker",
    "airline",
    "cement maker",
    "chemicals group",
    "shipping line",
    "food and agriculture group",
    "software company",
    "retailer",
)
_TITLES = (
    "chief executive",
    "chief sustainability officer",
    "head of public policy",
    "chief financial officer",
)

_TEMPLATES = {
    "support": (
        '{company}, a {sector}, backs {measure}. "We have already cut our emissions {pct}% since {year}, and '
        'clear rules reward that work," said {person}, {title}.',
        "In its {year} climate report, {company} said it supports {measure} and will invest ${money} million to "
        "meet it, according to {title} {person}.",
        "{person}, {title} of the {sector} {company}, urged lawmakers to adopt {measure} before {deadline}, "
        'calling it "the cheapest path to net zero".',
    ),
    "oppose": (
        "{company}, a {sector}, opposes {measure}, warning it would raise its costs by {pct}% and put {jobs} "
        "jobs at risk, {title} {person} said.",
        '"{measure_cap} is unworkable before {deadline}," {person}, {title} of {company}, told investors in '
        "{year}, adding that the {sector} would lobby against it.",
        "{company} filed comments against {measure}, arguing the rule would cost the {sector} ${money} million "
        'a year; {title} {person} called it "premature".',
    ),
    "neutral": (
        "{company}, a {sector}, said it is reviewing {measure} and will publish its assessment in {deadline}, "
        "according to {title} {person}.",
        'Asked about {measure}, {person}, {title} of {company}, said the {sector} would "comply with whatever '
        'rules are adopted" and reported a {pct}% change in emissions since {year}.',
        "{company} listed {measure} among the regulatory developments it is monitoring in its {year} annual "
        "report; {title} {person} gave no view on it.",
    ),
}


def _stance_word(label: str) -> str:
    """The stance as a word, whatever form the source used (0/1/2, none/against/favor, or the words)."""
    return _STANCES.get(label.strip().lower(), label)


@DATASETS.register("climate")
class ClimateDataset(DatasetPlugin):
    """Climate-policy statements and the stance each takes toward the policy."""

    name = "climate"
    instruction = "Classify the stance of the climate-policy statement below as support, oppose or neutral."
    fields = ("statement", "stance")
    optional_fields = ("company", "policy")
    hub_id = "cardiffnlp/tweet_eval"
    hub_config = "stance_climate"
    column_map = {"text": "statement", "label": "stance"}
    pii = {"company": "{company}", "person": "{person}", "amount": r"\$[\d,]+(?:\.\d+)?"}

    def render_target(self, record: Mapping[str, str]) -> str:
        header = "".join(
            f"{field.capitalize()}: {record[field]}\n" for field in self.optional_fields if record.get(field)
        )
        stance = _stance_word(str(record["stance"]))  # str(): ints when called on raw hub rows
        return f"{header}Statement: {record['statement']}\nStance: {stance}"

    def generate(self, n: int, seed: int) -> list[dict[str, str]]:
        from faker import Faker  # heavy import kept out of `ls` / `validate`

        # Unweighted sampling draws from the same name lists ~10x faster than Faker's frequency weights.
        fake, rng = Faker("en_US", use_weighting=False), random.Random(seed)
        fake.seed_instance(seed)
        records: list[dict[str, str]] = []
        seen: set[str] = set()
        while len(records) < n:
            policy, stance = rng.choice(list(_POLICIES)), rng.choice(list(_TEMPLATES))
            phrase, figures = _POLICIES[policy]
            measure = phrase.format(x=rng.choice(figures))
            company, year = fake.company(), rng.randint(2012, 2024)
            statement = rng.choice(_TEMPLATES[stance]).format(
                company=company,
                sector=rng.choice(_SECTORS),
                measure=measure,
                measure_cap=measure[0].upper() + measure[1:],
                person=f"{fake.first_name()} {fake.last_name()}",
                title=rng.choice(_TITLES),
                pct=rng.randint(3, 65),
                year=year,
                deadline=year + rng.randint(2, 12),
                money=f"{rng.randint(5, 4000):,}",
                jobs=f"{rng.randint(2, 900) * 10:,}",
            )
            record = {"id": f"clim-{len(records):06d}", "company": company, "policy": policy}
            record |= {"statement": statement, "stance": stance}
            target = self.render_target(record)
            if target not in seen:  # records must be individually distinguishable
                seen.add(target)
                records.append(record)
        return records
