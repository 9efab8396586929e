"""How a list page's cost grows with depth: page 1 against page 2,000 (per_page 20), by offset
and by cursor, on 100,000 products in PostgreSQL. Requests go through the whole app (Connexion's
validation, the handler, Peewee, the database) in-process; rounds are interleaved so that any
drift in the machine hits every variant alike. Prints a markdown table and writes it, with the
raw numbers, to bench/results/.

    BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/shopapi_bench python bench/list_depth.py
"""

import json
import os
import pathlib
import random
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import create_app  # noqa: E402
from models import Product  # noqa: E402
from models.db import (  # noqa: E402
    create_database_if_missing,
    open_database,
    use,
)
from models.migrations import migrate  # noqa: E402
from shopapi.auth.tokens import AccessTokens  # noqa: E402
from shopapi.settings import Settings  # noqa: E402
from shopapi.web.listing import keyset_after  # noqa: E402

URL = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/shopapi_bench")
PRODUCTS = 100_000
PER_PAGE = 20
DEEP_PAGE = 2_000
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "200"))
RESULTS = ROOT / "bench" / "results"


def seed(db) -> None:
    use(db)
    migrate(db)
    with db.connection_context():
        have = Product.select().count()
        if have >= PRODUCTS:
            return
        rng = random.Random(7)
        rows = [
            {
                "sku": f"BENCH-{n:06d}",
                "name": f"Product {n}",
                "price_cents": rng.randrange(100, 100_000),  # many ties on the sort key
                "stock": rng.randrange(0, 500),
                "category": rng.choice(["books", "kitchen", "garden", None]),
            }
            for n in range(have, PRODUCTS)
        ]
        with db.atomic():
            for start in range(0, len(rows), 5_000):
                Product.insert_many(rows[start : start + 5_000]).execute()
        db.execute_sql("ANALYZE product")


def timed(client, url) -> float:
    start = time.perf_counter()
    response = client.get(url)
    elapsed = time.perf_counter() - start
    assert response.status_code == 200, response.text
    return elapsed * 1000


def explain(db, sql: str, params) -> str:
    plan = db.execute_sql(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {sql}", params)
    return "\n".join(row[0] for row in plan)


def main() -> None:
    create_database_if_missing(URL)
    db = open_database(URL)
    seed(db)
    # Rate limits far above what the rounds send; a reader's token, as every request needs one.
    settings = Settings(database_url=URL, rate_limit_scale=1000)
    app = create_app(settings)
    client = app.test_client()
    token = AccessTokens(settings).issue("client:bench", ["products:read"])
    client.headers["Authorization"] = f"Bearer {token}"

    variants = {}
    for sort in ("id", "price_cents"):
        base = f"/v1/products?sort={sort}&per_page={PER_PAGE}"
        before_deep = client.get(f"{base}&page={DEEP_PAGE - 1}").json()["meta"]["next_cursor"]
        first = client.get(f"{base}&page=1").json()["meta"]["next_cursor"]
        variants[f"sort={sort}, offset, page 1"] = f"{base}&page=1"
        variants[f"sort={sort}, offset, page {DEEP_PAGE}"] = f"{base}&page={DEEP_PAGE}"
        variants[f"sort={sort}, cursor, page 2"] = f"{base}&cursor={first}"
        variants[f"sort={sort}, cursor, page {DEEP_PAGE}"] = f"{base}&cursor={before_deep}"

    samples = {name: [] for name in variants}
    for url in variants.values():  # warm-up
        for _ in range(5):
            timed(client, url)
    for _ in range(ROUNDS):
        for name, url in variants.items():
            samples[name].append(timed(client, url))

    medians = {name: statistics.median(values) for name, values in samples.items()}
    lines = [
        f"# List page cost by depth ({PRODUCTS:,} products, PostgreSQL, per_page {PER_PAGE}, "
        f"median of {ROUNDS} interleaved rounds, in-process)",
        "",
        "| request | median ms | ratio to page 1 by offset |",
        "|---|---|---|",
    ]
    for sort in ("id", "price_cents"):
        baseline = medians[f"sort={sort}, offset, page 1"]
        for name in (n for n in variants if n.startswith(f"sort={sort},")):
            lines.append(f"| {name} | {medians[name]:.2f} | {medians[name] / baseline:.2f} |")

    # The plans behind the numbers: the deep offset page scans and discards; the keyset page
    # starts where the cursor says, on the (price_cents, id) index.
    with db.connection_context():
        offset = (
            Product.select()
            .order_by(Product.price_cents.asc(nulls="LAST"), Product.id)
            .offset((DEEP_PAGE - 1) * PER_PAGE)
            .limit(PER_PAGE + 1)
        )
        anchor = offset.first()
        keys = [(Product.price_cents, False), (Product.id, False)]
        keyset = (
            Product.select()
            .where(keyset_after(keys, [anchor.price_cents, anchor.id]))
            .order_by(Product.price_cents.asc(nulls="LAST"), Product.id)
            .limit(PER_PAGE + 1)
        )
        plans = {"offset": explain(db, *offset.sql()), "keyset": explain(db, *keyset.sql())}
    lines += ["", f"Plan, page {DEEP_PAGE} by offset:", "```", plans["offset"], "```"]
    lines += [f"Plan, page {DEEP_PAGE} by keyset (cursor):", "```", plans["keyset"], "```"]

    report = "\n".join(lines)
    print(report)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "list-depth.md").write_text(report + "\n")
    (RESULTS / "list-depth.json").write_text(
        json.dumps({"medians_ms": medians, "rounds": ROUNDS, "plans": plans}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
