"""How the run format declares a field, and the strict check of a value against its fields.

A table is a tuple of :class:`Field`. A field whose value is an object (or a list of objects)
names that object's table in ``of``; a field whose value is an object keyed by data (stage
names, HTTP statuses, series, hosts) says so with :class:`Keyed`, whose own ``of`` is the table
of each value (None: each value is a plain number, string or list). Nothing else may appear:
:func:`undeclared` lists every key a value holds that its table does not declare.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Keyed(NamedTuple):
    """An object whose keys are data, not names the format fixes: ``key`` says what they are,
    ``of`` is the table of each value (None when the values are plain)."""

    key: str
    of: tuple[Field, ...] | None = None


class Field(NamedTuple):
    name: str
    unit: str  # "ms", "s", "unix s", "bytes", "percent", "count", "" for none
    nullable: bool  # may be null in a record
    doc: str
    optional: bool = False  # left out of a record unless given
    of: tuple[Field, ...] | Keyed | None = None  # what an object value holds


def names(table: tuple[Field, ...]) -> tuple[str, ...]:
    return tuple(f.name for f in table)


class Builder:
    """Builds one kind of record (or message) from its table: every required field, null unless
    given, in table order; a name the table does not know is a TypeError."""

    def __init__(self, what: str, table: tuple[Field, ...]):
        self.what = what
        self.names = frozenset(names(table))
        self._order = names(table)
        self._base = {f.name: None for f in table if not f.optional}

    def __call__(self, **values: Any) -> dict[str, Any]:
        if values.keys() <= self._base.keys():  # the common case: no optional field, the table's order
            out = self._base.copy()
            out.update(values)
            return out
        self._check(values)
        return {k: values.get(k) for k in self._order if k in self._base or k in values}

    def update(self, record: dict[str, Any], **values: Any) -> dict[str, Any]:
        """Set fields of an existing record, by name; returns it."""
        self._check(values)
        record.update(values)
        return record

    def _check(self, values: dict[str, Any]) -> None:
        if not values.keys() <= self.names:
            unknown = ", ".join(sorted(values.keys() - self.names))
            raise TypeError(f"{self.what} has no field {unknown}")


def undeclared(table: tuple[Field, ...], value: object, where: str) -> list[str]:
    """Every key in ``value`` (an object or a list of objects, nested all the way down) that
    its table does not declare, as ``where.key.path`` (``[i]`` for a list's i-th item)."""
    if isinstance(value, list):
        return [k for i, item in enumerate(value) for k in undeclared(table, item, f"{where}[{i}]")]
    if not isinstance(value, dict):
        return []  # a scalar where an object is declared is a type matter, not a key
    by_name = {f.name: f for f in table}
    out = []
    for key, item in value.items():
        field = by_name.get(key)
        if field is None:
            out.append(f"{where}.{key}")
        else:
            out += _undeclared_in(field.of, item, f"{where}.{key}")
    return out


def _undeclared_in(of: tuple[Field, ...] | Keyed | None, value: object, where: str) -> list[str]:
    if isinstance(value, list):
        return [k for i, item in enumerate(value) for k in _undeclared_in(of, item, f"{where}[{i}]")]
    if not isinstance(value, dict):
        return []
    if of is None:  # an object where the format declares a plain value: all of its keys are news
        return [f"{where}.{key}" for key in value]
    if isinstance(of, Keyed):
        return [k for key, item in value.items() for k in _undeclared_in(of.of, item, f"{where}.{key}")]
    return undeclared(of, value, where)
