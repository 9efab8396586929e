"""Products have a weight in grams (`weight_grams`, v3's), null where not known; an index on it
ending in `id`, as m0002's do, serves v3's sort and filters by it at any depth."""

import peewee


def up(db: peewee.Database) -> None:
    db.execute_sql('ALTER TABLE "product" ADD COLUMN "weight_grams" INTEGER')
    db.execute_sql('CREATE INDEX "product_weight_grams_id" ON "product" ("weight_grams", "id")')
