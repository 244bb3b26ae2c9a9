"""Filters on the kept columns (`--where NAME=VALUE`, `NAME>=NUMBER`, ...): parsed once, always SQL parameters.

    where = parse_where("score>=0.5")     # ColumnFilter("score", ">=", "0.5")
    condition, parameters = where.sql()   # on the predictions table's `columns` jsonb

The kept columns live in one `columns` jsonb object per image (`common/kept_columns.py`),
so a column's name and the value compared are both query parameters: no user text ever
becomes SQL. `=` matches a text value, a label among a labels list, or a number equal to
the value; `<`, `<=`, `>`, `>=` compare numbers only (exactly: as PostgreSQL's numeric, so an int64 id keeps
every digit) (a row whose value is not a number,
or that has no value, does not match).
"""

from __future__ import annotations

import dataclasses
import re
from decimal import Decimal, InvalidOperation
from typing import Any

OPERATORS = ("<=", ">=", "<", ">", "=")
_WHERE = re.compile(r"^(?P<name>.+?)(?P<op><=|>=|<|>|=)(?P<value>.*)$", re.S)


@dataclasses.dataclass(frozen=True)
class ColumnFilter:
    """One condition on a kept column: `name` `op` `value` (the value as the user wrote it)."""

    name: str
    op: str
    value: str

    def sql(self) -> tuple[Any, list[Any]]:
        """(psycopg SQL condition, its parameters)."""
        from psycopg import sql

        number = _number(self.value)
        if self.op == "=":
            text = sql.SQL("((columns -> %s) ? %s")
            parameters: list[Any] = [self.name, self.value]
            if number is not None:
                text += sql.SQL(" OR (jsonb_typeof(columns -> %s) = 'number' AND (columns ->> %s)::numeric = %s)")
                parameters += [self.name, self.name, number]
            return text + sql.SQL(")"), parameters
        return (sql.SQL("(jsonb_typeof(columns -> %s) = 'number' AND (columns ->> %s)::numeric {} %s)").format(
            sql.SQL(self.op)), [self.name, self.name, number])

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value}"


def _number(text: str) -> Decimal | None:
    """The value as an exact decimal (an int column's id over 2**53 included: compared as numeric, never as
    float8), or None when it is not a finite number."""
    try:
        value = Decimal(text.strip().replace("_", "x"))  # As cells.py reads a number: no '1_000'.
    except InvalidOperation:
        return None
    # Beyond float's range (1e400) is no number, as before; PostgreSQL's numeric holds every such one.
    return value if value.is_finite() and -400 <= value.adjusted() <= 400 else None


def parse_where(text: str) -> ColumnFilter:
    """'NAME=VALUE', 'NAME>=NUMBER', ... -> ColumnFilter; ValueError (one line) when it is not one."""
    if "\x00" in text:
        raise ValueError("a --where filter cannot hold a NUL byte")
    match = _WHERE.match(text)
    if not match or not match["name"].strip():
        raise ValueError(f"--where {text[:80]!r} is not NAME=VALUE or NAME<NUMBER (<, <=, >, >=)")
    name, op, value = match["name"].strip(), match["op"], match["value"]
    if op != "=" and _number(value) is None:
        raise ValueError(f"--where {text[:80]!r}: {op} compares numbers, and {value[:40]!r} is not a finite number")
    return ColumnFilter(name, op, value)
