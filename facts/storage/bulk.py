"""Multi-row INSERTs for the write path's hot tables, without the ORM's per-value work.

`QuerySet.bulk_create` prepares every value of every row through the compiler (about
2 µs a value); a replayed run inserts ~1,300 values (its candidates, the cards' mirror
rows and history, the message ids), so that preparation was a fifth of the write
path's time. `insert` builds one INSERT with the backend's own operations (quoting,
``INSERT OR IGNORE`` / ``ON CONFLICT``), passes values the driver takes as they are
(str, int, float, bool, None in a plain field) and hands everything else to the field's
`get_db_prep_save`, and runs it with `executemany`. What it stores is exactly what
`bulk_create` stores (`tests/test_bulk.py` compares them); unlike `bulk_create` it does
not set primary keys on the objects.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from django.db import connections, models, router
from django.db.models.constants import OnConflict

# Fields whose `get_db_prep_save` hands a str/int/float/bool/None value to the driver
# unchanged.
_PLAIN_FIELDS = (
    models.CharField,
    models.TextField,
    models.IntegerField,
    models.FloatField,
    models.BooleanField,
)
_PLAIN_VALUES = (str, int, float, bool)


def column(model: type[models.Model], name: str) -> str:
    """The database column of `model`'s concrete field `name`."""
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or not field.column:
        raise ValueError(f"{model.__name__}.{name} is not a concrete field")
    return field.column


@functools.lru_cache(maxsize=64)
def _statement(
    model: type[models.Model], db: str, on_conflict: OnConflict | None, update: tuple[str, ...], unique: tuple[str, ...]
) -> tuple[str, tuple]:
    """The INSERT of `model`'s columns (auto primary key left out) and how to get each value."""
    meta = model._meta
    ops = connections[db].ops
    returning = set(meta.db_returning_fields)
    fields = [f for f in meta.local_concrete_fields if f not in returning]
    columns = ", ".join(ops.quote_name(column(model, f.name)) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    suffix = ops.on_conflict_suffix_sql(
        fields, on_conflict, [column(model, n) for n in update], [column(model, n) for n in unique]
    )
    sql = f"{ops.insert_statement(on_conflict=on_conflict)} {ops.quote_name(meta.db_table)} ({columns}) "
    sql += f"VALUES ({placeholders}) {suffix or ''}"
    plan = []
    for field in fields:
        stamped = getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False)
        target = field.target_field if isinstance(field, models.ForeignKey) else field
        plain = isinstance(target, _PLAIN_FIELDS) and not isinstance(target, models.DateField)
        plan.append((field, field.attname, stamped, plain))
    return sql.rstrip(), tuple(plan)


def insert(
    model: type[models.Model],
    objs: Sequence[models.Model],
    *,
    ignore_conflicts: bool = False,
    update_conflicts: Sequence[str] = (),
    unique_fields: Sequence[str] = (),
) -> None:
    """INSERT `objs` (instances of `model`) in one statement run per row.

    `ignore_conflicts`: skip rows that break a unique constraint. `update_conflicts`:
    the fields to overwrite when a row with the same `unique_fields` exists (upsert).
    """
    if not objs:
        return
    db = router.db_for_write(model)
    conn = connections[db]
    on_conflict = OnConflict.UPDATE if update_conflicts else OnConflict.IGNORE if ignore_conflicts else None
    sql, plan = _statement(model, db, on_conflict, tuple(update_conflicts), tuple(unique_fields))
    rows = []
    for obj in objs:
        row = []
        for field, attname, stamped, plain in plan:
            value = field.pre_save(obj, add=True) if stamped else getattr(obj, attname)
            if not (plain and (value is None or isinstance(value, _PLAIN_VALUES))):
                value = field.get_db_prep_save(value, connection=conn)
            row.append(value)
        rows.append(row)
    with conn.cursor() as cursor:
        cursor.executemany(sql, rows)
