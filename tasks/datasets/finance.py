"""Financial instruction records, mirroring Sujet-Finance-Instruct-177k.

Real dataset: `sujet-ai/Sujet-Finance-Instruct-177k <https://huggingface.co/datasets/sujet-ai/Sujet-Finance-Instruct-177k>`_
(columns ``inputs``, ``answer``, ``system_prompt``, ``user_prompt``, ``task_type``, ``dataset``), the
finance set of the PrivAuditor benchmark. Its ``inputs`` column already holds the system and user
prompt, so only ``task_type``, ``inputs`` (our ``input``) and ``answer`` are rendered.

The offline version generates records of the same schema and the same task types (``sentiment_analysis``,
``qa_with_context``, ``ner``, ``yes_no_question``, ``topic_classification``) about fake people, companies,
accounts and figures (Faker), so that each record is individually distinguishable, as real customer or
filing records are.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from datetime import date, timedelta

from . import DATASETS
from ._base import DatasetPlugin

Record = tuple[str, str]  # (input, answer) of one task


def _person(fake) -> str:
    return f"{fake.first_name()} {fake.last_name()}"  # no "Dr."/"PhD" decorations of fake.name()


# Spelled out here: strftime's %B follows the process locale, and Faker's month_name() draws a date
# up to *now*, so its output changes with the clock; records must depend on the seed alone.
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")  # fmt: skip


def _day(rng: random.Random) -> date:
    """A day in 2015-2024: a fixed range, as Faker's "this decade" would move with today's date."""
    return date(2015, 1, 1) + timedelta(days=rng.randrange(3653))


def _spelled(day: date, year: bool = True) -> str:
    """``March 04, 2019`` (or ``March 04``) in English whatever the locale."""
    return f"{_MONTHS[day.month - 1]} {day.day:02d}" + (f", {day.year}" if year else "")


def _money(value: float) -> str:
    return f"${value:,.2f}"


def _sentiment(fake, rng: random.Random) -> Record:
    company, person, pct = fake.company(), _person(fake), rng.uniform(1.2, 18.0)
    quarter, region = f"Q{rng.randint(1, 4)} {rng.randint(2016, 2025)}", rng.choice(_REGIONS)
    choices = {
        "positive": [
            f"{company} shares rose {pct:.1f}% after quarterly revenue of ${rng.randint(40, 900)} million beat analyst estimates.",
            f"{company} raised its full-year guidance to ${rng.uniform(1, 20):.1f} billion as demand in {region} held up in {quarter}.",
            f"Moody's upgraded {company} to {rng.choice(['A2', 'Baa1', 'A3'])}, citing {pct:.1f}% lower net debt, CFO {person} said.",
        ],
        "negative": [
            f"{company} will cut {rng.randint(80, 4000)} jobs after a {pct:.1f}% drop in {quarter} net income.",
            f"{company} shares slid {pct:.1f}% after chief executive {person} warned of weaker margins in {region}.",
            f"{company} missed {quarter} earnings estimates by {rng.randint(2, 30)} cents per share and suspended its buyback.",
        ],
        "neutral": [
            f"{company} will hold its annual shareholder meeting in {fake.city()} on {_spelled(_day(rng))}.",
            f"{company} appointed {person} as chief financial officer, effective {_spelled(_day(rng))}.",
            f"{company} will report {quarter} results on {_spelled(_day(rng), year=False)} before the market opens.",
        ],
    }
    answer = rng.choice(list(choices))
    return rng.choice(choices[answer]), answer


def _qa_with_context(fake, rng: random.Random) -> Record:
    company, year = fake.company(), rng.randint(2015, 2025)
    if rng.random() < 0.5:
        name, last4 = _person(fake), f"{rng.randint(0, 9999):04d}"
        opening, deposits = rng.uniform(200, 60000), rng.uniform(100, 15000)
        withdrawals = rng.uniform(50, opening + deposits)
        closing = opening + deposits - withdrawals
        statement = (
            f"Statement for {name}, checking account ending {last4} at {company} Bank, {rng.choice(_MONTHS)} {year}: "
            f"opening balance {_money(opening)}, deposits {_money(deposits)}, withdrawals {_money(withdrawals)}."
        )
        question = rng.choice(
            ["What is the closing balance?", "How much was left in the account at month end?"]
        )
        answer = f"The closing balance is {_money(opening)} + {_money(deposits)} - {_money(withdrawals)} = {_money(closing)}."
        return f"{statement} Question: {question}", answer
    prior = rng.randint(100, 9000)
    revenue = int(prior * rng.uniform(0.75, 1.4))
    expenses = rng.randint(int(revenue * 0.5), int(revenue * 1.1))
    statement = (
        f"{company} reported fiscal {year} revenue of ${revenue:,} million, compared with ${prior:,} million in "
        f"fiscal {year - 1}. Operating expenses were ${expenses:,} million."
    )
    if rng.random() < 0.5:
        change = revenue - prior
        word = "grew" if change >= 0 else "fell"
        question = f"By how much did revenue change in fiscal {year}?"
        answer = f"Revenue {word} by ${abs(change):,} million, or {abs(change) / prior:.1%}, to ${revenue:,} million."
    else:
        margin = revenue - expenses
        question = f"What was {company}'s operating income in fiscal {year}?"
        answer = f"Operating income was ${revenue:,} million - ${expenses:,} million = ${margin:,} million."
    return f"{statement} Question: {question}", answer


def _ner(fake, rng: random.Random) -> Record:
    person, company, city = _person(fake), fake.company(), fake.city()
    template = rng.choice(
        [
            "{p}, chief executive of {o}, said the firm will open a new trading office in {c} next year.",
            "{o} hired {p} to lead its wealth management unit in {c}, according to a memo seen by reporters.",
            "Regulators in {c} fined {o} ${m} million; compliance head {p} declined to comment.",
            "{p} sold {n:,} shares of {o} on Tuesday, a filing with the {c} exchange showed.",
        ]
    )
    text = template.format(p=person, o=company, c=city, m=rng.randint(1, 250), n=rng.randint(1000, 900000))
    return text, f"PER: {person}; ORG: {company}; LOC: {city}"


def _yes_no(fake, rng: random.Random) -> Record:
    name, score, dti = _person(fake), rng.randint(540, 840), rng.randint(8, 55)
    purpose, (low, high) = rng.choice(list(_LOAN_PURPOSES.items()))
    income, amount = rng.randint(28, 320) * 1000, rng.randint(low, high) * 500
    request = (
        f"Loan request from {name}: ${amount:,} for {purpose}, annual income ${income:,}, credit score {score}, "
        f"debt-to-income ratio {dti}%. Does the applicant meet the policy of a credit score of at least 680 "
        "and a debt-to-income ratio below 36%?"
    )
    if score >= 680 and dti < 36:
        return request, f"Yes. A credit score of {score} and a ratio of {dti}% are both within policy."
    reason = (
        f"the credit score of {score} is below 680"
        if score < 680
        else f"the ratio of {dti}% is not below 36%"
    )
    return request, f"No, because {reason}."


def _topic(fake, rng: random.Random) -> Record:
    company, other, person = fake.company(), fake.company(), _person(fake)
    choices = {
        "mergers and acquisitions": f"{company} agreed to buy {other} for ${rng.uniform(0.2, 30):.1f} billion in cash and stock.",
        "dividends": f"{company} declared a quarterly dividend of ${rng.uniform(0.05, 2.5):.2f} per share, payable {_spelled(_day(rng), year=False)}.",
        "ipo": f"{company} priced its initial public offering at ${rng.randint(9, 60)} per share, raising ${rng.randint(50, 2000)} million.",
        "earnings": f"{company} posted earnings of ${rng.uniform(0.1, 6):.2f} per share on revenue of ${rng.randint(30, 8000)} million.",
        "management change": f"{company} named {person} chief executive, replacing {_person(fake)} after {rng.randint(2, 19)} years.",
        "personal banking": f"Card payment of {_money(rng.uniform(3, 2500))} by {person} to {other} on {_day(rng):%Y-%m-%d}.",
    }
    topic = rng.choice(list(choices))
    return choices[topic], topic


# loan purpose: range of the amount, in units of $500
_LOAN_PURPOSES = {
    "a home renovation": (20, 300),
    "a used car": (10, 80),
    "debt consolidation": (6, 120),
    "a small bakery": (50, 500),
    "tuition": (8, 120),
    "a home purchase": (300, 1600),
}
_REGIONS = ["Europe", "North America", "Asia-Pacific", "Latin America", "the Middle East"]
_TASKS: dict[str, Callable[[object, random.Random], Record]] = {
    "sentiment_analysis": _sentiment,
    "qa_with_context": _qa_with_context,
    "ner": _ner,
    "yes_no_question": _yes_no,
    "topic_classification": _topic,
}


@DATASETS.register("finance")
class FinanceDataset(DatasetPlugin):
    """Financial instruction/answer records (sentiment, QA over statements, NER, yes/no, topic)."""

    name = "finance"
    instruction = "Solve the financial analysis task below and give the answer."
    fields = ("task_type", "input", "answer")
    hub_id = "sujet-ai/Sujet-Finance-Instruct-177k"
    column_map = {"inputs": "input"}
    pii = {  # matched in this order: a company's last names are not a person's
        "company": "{company}",
        "person": "{person}",
        "account": r"account ending (\d{4})",
        "credit_score": r"credit score (?:of )?(\d{3})",
        "date": r"(?:" + "|".join(_MONTHS) + r") \d{2}(?:, \d{4})?|\d{4}-\d{2}-\d{2}",
        "amount": r"\$[\d,]+(?:\.\d+)?",
    }

    def render_target(self, record: Mapping[str, str]) -> str:
        return f"Task: {record['task_type']}\nInput: {record['input']}\nAnswer: {record['answer']}"

    def generate(self, n: int, seed: int) -> list[dict[str, str]]:
        from faker import Faker  # heavy import kept out of `ls` / `validate`

        # Unweighted sampling draws from the same name lists ~10x faster than Faker's frequency weights.
        fake, rng = Faker("en_US", use_weighting=False), random.Random(seed)
        fake.seed_instance(seed)
        records: list[dict[str, str]] = []
        seen: set[str] = set()
        while len(records) < n:
            task_type = rng.choice(list(_TASKS))
            text, answer = _TASKS[task_type](fake, rng)
            record = {
                "id": f"fin-{len(records):06d}",
                "task_type": task_type,
                "input": text,
                "answer": answer,
            }
            target = self.render_target(record)
            if target not in seen:  # records must be individually distinguishable
                seen.add(target)
                records.append(record)
        return records
