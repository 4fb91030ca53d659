"""Text-to-SQL records (question, schema context, SQL), mirroring gretelai/synthetic_text_to_sql.

Real dataset: `gretelai/synthetic_text_to_sql <https://huggingface.co/datasets/gretelai/synthetic_text_to_sql>`_
(columns ``id``, ``domain``, ``domain_description``, ``sql_complexity``, ``sql_task_type``,
``sql_prompt``, ``sql_context``, ``sql``, ``sql_explanation``), the SQL set of the PrivAuditor benchmark.
``sql_prompt`` is the question and ``sql_context`` the ``CREATE TABLE`` / ``INSERT`` statements it is
asked against.

The offline version builds, per record, a small schema for one of several domains (banking,
healthcare, human resources, retail, insurance, education, real estate, telecom) with varying table and
column names, inserts rows of fake people and values (Faker), and asks a question of one of several
shapes (filter, aggregate, group by, order/limit, join), with SQL that is consistent with that schema.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from datetime import date, timedelta

from . import DATASETS
from ._base import DatasetPlugin

# domain: (entity tables, person columns, entity noun, (category column, its label, values),
#          (amount column, label, low, high), (date column, question), (child tables, child noun, child amount column))
_DOMAINS = {
    "banking": (
        ("accounts", "bank_accounts", "customer_accounts"),
        ("customer_name", "holder_name"),
        "account holders",
        ("account_type", "account type", ("checking", "savings", "money market", "certificate of deposit")),
        ("balance", "balance", 100, 250000),
        ("opened_on", "How many accounts were opened after {d}?"),
        (("transactions", "account_transactions"), "transactions", "amount"),
    ),
    "healthcare": (
        ("patients", "admissions"),
        ("patient_name", "full_name"),
        "patients",
        ("department", "department", ("cardiology", "oncology", "orthopedics", "neurology", "pediatrics")),
        ("treatment_cost", "treatment cost", 300, 90000),
        ("admitted_on", "How many patients were admitted after {d}?"),
        (("prescriptions", "medications"), "prescriptions", "cost"),
    ),
    "human resources": (
        ("employees", "staff", "workers"),
        ("employee_name", "full_name"),
        "employees",
        ("department", "department", ("Engineering", "Sales", "Finance", "Marketing", "Legal", "Operations")),
        ("salary", "salary", 38000, 240000),
        ("hire_date", "How many employees were hired after {d}?"),
        (("bonuses", "payroll_adjustments"), "bonus payments", "bonus_amount"),
    ),
    "retail": (
        ("customers", "shoppers", "members"),
        ("customer_name", "member_name"),
        "customers",
        ("loyalty_tier", "loyalty tier", ("bronze", "silver", "gold", "platinum")),
        ("lifetime_spend", "lifetime spend", 20, 40000),
        ("joined_on", "How many customers joined after {d}?"),
        (("orders", "purchases"), "orders", "order_total"),
    ),
    "insurance": (
        ("policies", "policyholders"),
        ("holder_name", "insured_name"),
        "policyholders",
        ("policy_type", "policy type", ("auto", "home", "life", "renters", "travel")),
        ("annual_premium", "annual premium", 150, 9000),
        ("start_date", "How many policies started after {d}?"),
        (("claims", "insurance_claims"), "claims", "claim_amount"),
    ),
    "education": (
        ("students", "enrollments"),
        ("student_name", "full_name"),
        "students",
        ("major", "major", ("Biology", "Economics", "Computer Science", "History", "Nursing")),
        ("tuition_balance", "tuition balance", 500, 45000),
        ("enrolled_on", "How many students enrolled after {d}?"),
        (("payments", "tuition_payments"), "tuition payments", "amount_paid"),
    ),
    "real estate": (
        ("properties", "listings"),
        ("owner_name", "seller_name"),
        "property owners",
        ("property_type", "property type", ("condo", "townhouse", "single-family", "duplex")),
        ("list_price", "list price", 90000, 2500000),
        ("listed_on", "How many properties were listed after {d}?"),
        (("offers", "bids"), "offers", "offer_amount"),
    ),
    "telecom": (
        ("subscribers", "mobile_subscribers"),
        ("subscriber_name", "account_owner"),
        "subscribers",
        ("plan", "plan", ("prepaid", "basic", "unlimited", "family", "business")),
        ("monthly_charge", "monthly charge", 10, 320),
        ("activated_on", "How many lines were activated after {d}?"),
        (("invoices", "bills"), "invoices", "invoice_total"),
    ),
}


_FIRST_DAY = date(2015, 1, 1)


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _record(fake, rng: random.Random) -> dict[str, str]:
    domain = rng.choice(list(_DOMAINS))
    (
        tables,
        people,
        noun,
        (cat, cat_label, cats),
        (num, num_label, low, high),
        (date, date_question),
        child,
    ) = _DOMAINS[domain]
    table, person, (child_tables, child_noun, child_num) = rng.choice(tables), rng.choice(people), child
    rows = [
        (
            i,
            f"{fake.first_name()} {fake.last_name()}",
            rng.choice(cats),
            round(rng.uniform(low, high), 2),
            (_FIRST_DAY + timedelta(days=rng.randrange(3653))).isoformat(),  # 2015-2024, not "today"-relative
        )
        for i in range(1, rng.randint(2, 3) + 1)  # short contexts keep records within max_length
    ]
    context = (
        f"CREATE TABLE {table} (id INT, {person} VARCHAR(60), {cat} VARCHAR(30), {num} DECIMAL(12,2), {date} DATE); "
        f"INSERT INTO {table} (id, {person}, {cat}, {num}, {date}) VALUES "
        + ", ".join(f"({i}, {_quote(p)}, {_quote(c)}, {v:.2f}, '{d}')" for i, p, c, v, d in rows)
        + ";"
    )
    pick = rng.choice(rows)
    shape = rng.choice(["where", "aggregate", "group", "top", "date", "join"])
    if shape == "where":
        # A round figure just below the picked row's value (as people ask), so that row matches.
        threshold = int(pick[3] - 1) // 10 * 10 if pick[3] > 100 else int(pick[3] - 1)
        question = rng.choice(
            ["List the {n} whose {l} is above {t}.", "Which {n} have a {l} greater than {t}?"]
        )
        question = question.format(n=noun, l=num_label, t=threshold)
        sql = f"SELECT {person} FROM {table} WHERE {num} > {threshold};"
    elif shape == "aggregate":
        func, word = rng.choice([("SUM", "total"), ("AVG", "average"), ("MAX", "highest"), ("MIN", "lowest")])
        question = f"What is the {word} {num_label} of {noun} with {cat_label} '{pick[2]}'?"
        sql = f"SELECT {func}({num}) FROM {table} WHERE {cat} = {_quote(pick[2])};"
    elif shape == "group":
        question = rng.choice(["How many {n} are there for each {c}?", "Count the {n} per {c}."])
        question = question.format(n=noun, c=cat_label)
        sql = f"SELECT {cat}, COUNT(*) FROM {table} GROUP BY {cat};"
    elif shape == "top":
        k = rng.randint(2, 3)
        order, word = rng.choice([("DESC", "highest"), ("ASC", "lowest")])
        question = f"Show the {k} {noun} with the {word} {num_label}, with their {num_label}."
        sql = f"SELECT {person}, {num} FROM {table} ORDER BY {num} {order} LIMIT {k};"
    elif shape == "date":
        question = date_question.format(d=pick[4])
        sql = f"SELECT COUNT(*) FROM {table} WHERE {date} > '{pick[4]}';"
    else:
        singular = table[:-3] + "y" if table.endswith("ies") else table.rstrip("s")
        child_table, key = rng.choice(child_tables), f"{singular}_id"
        child_rows = [
            (j, pick[0] if j == 1 else rng.choice(rows)[0], round(rng.uniform(5, high / 10), 2))
            for j in range(1, rng.randint(2, 3) + 1)  # the first one belongs to the asked-about person
        ]
        context += (
            f" CREATE TABLE {child_table} (id INT, {key} INT, {child_num} DECIMAL(12,2)); "
            f"INSERT INTO {child_table} (id, {key}, {child_num}) VALUES "
            + ", ".join(f"({j}, {k}, {v:.2f})" for j, k, v in child_rows)
            + ";"
        )
        question = rng.choice(["What is the total of {p}'s {c}?", "How much do {p}'s {c} add up to?"])
        question = question.format(p=pick[1], c=child_noun)
        sql = (
            f"SELECT SUM(c.{child_num}) FROM {child_table} c JOIN {table} t ON c.{key} = t.id "
            f"WHERE t.{person} = {_quote(pick[1])};"
        )
    return {"domain": domain, "question": question, "context": context, "sql": sql}


@DATASETS.register("sql")
class SQLDataset(DatasetPlugin):
    """Text-to-SQL records: a question, the schema and rows it is asked against, and the SQL answer."""

    name = "sql"
    instruction = "Write the SQL query that answers the question, given the database context."
    fields = ("question", "context", "sql")
    optional_fields = ("domain",)
    hub_id = "gretelai/synthetic_text_to_sql"
    column_map = {"sql_prompt": "question", "sql_context": "context"}
    pii = {"person": "{person}", "date": r"\d{4}-\d{2}-\d{2}", "amount": r"\b\d+\.\d{2}\b"}

    def render_target(self, record: Mapping[str, str]) -> str:
        domain = f"Domain: {record['domain']}\n" if record.get("domain") else ""
        return f"{domain}Question: {record['question']}\nContext: {record['context']}\nSQL: {record['sql']}"

    def generate(self, n: int, seed: int) -> list[dict[str, str]]:
        from faker import Faker  # heavy import kept out of `ls` / `validate`

        # Unweighted sampling draws from the same name lists ~10x faster than Faker's frequency weights.
        fake, rng = Faker("en_US", use_weighting=False), random.Random(seed)
        fake.seed_instance(seed)
        records: list[dict[str, str]] = []
        seen: set[str] = set()
        while len(records) < n:
            record = {"id": f"sql-{len(records):06d}", **_record(fake, rng)}
            target = self.render_target(record)
            if target not in seen:  # records must be individually distinguishable
                seen.add(target)
                records.append(record)
        return records
