"""How the run format declares a field, and the strict check of a value against its fields.

Every record and table is declared once, as a TypedDict whose fields carry their unit and
meaning: ``ttfb_ms: Annotated[float | None, Doc("ms", "t1 - t0")]`` (``NotRequired[...]``: left
out of a record unless given). The class is the type the code builds and reads (a dict at run
time, so the files are written as they always were); :func:`table` derives from it the table of
:class:`Field` that the builders, the strict check and the manual's reference read.

A table is a tuple of :class:`Field`. A field whose value is an object (or a list of objects)
names that object's table in ``of``; a field whose value is an object keyed by data (stage
names, HTTP statuses, series, hosts) says so with :class:`Keyed`, whose own ``of`` is the table
of each value (None: each value is a plain number, string or list). Nothing else may appear:
:func:`undeclared` lists every key a value holds that its table does not declare.
"""

from __future__ import annotations

import functools
import sys
import types
import typing
from typing import Any, NamedTuple, Union

if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict
else:  # Python 3.10: typing's TypedDict does not know NotRequired
    from typing_extensions import NotRequired, TypedDict

__all__ = ["Doc", "Field", "Keyed", "NotRequired", "TypedDict", "class_of", "table"]


class Doc(NamedTuple):
    """A declared field's unit and meaning, in its ``Annotated`` type. ``key`` says what the keys
    of an object keyed by data are (a ``dict[str, ...]`` field); ``of`` gives the table of an
    object declared elsewhere than in a class (run.json's options: :data:`runformat.options.RUN_OPTIONS`)."""

    unit: str  # "ms", "s", "unix s", "bytes", "percent", "count", "" for none
    doc: str
    key: str | None = None
    of: tuple[Field, ...] | None = None


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


@functools.cache
def table(cls: type) -> tuple[Field, ...]:
    """The table of a declared class: each field's name, unit and meaning (its :class:`Doc`),
    nullable where its type takes None, optional where it is ``NotRequired``, and the table of
    a nested class (an object, a list of them, or ``dict[str, ...]`` keyed by data) in ``of``."""
    optional: frozenset[str] = getattr(cls, "__optional_keys__", frozenset())
    out: list[Field] = []
    hints = cls.__annotations__  # a TypedDict's own and its bases', evaluated where declared
    if any(isinstance(hint, str) for hint in hints.values()):  # declared under postponed annotations
        hints = typing.get_type_hints(cls, include_extras=True)
    for name, hint in hints.items():
        if getattr(hint, "__origin__", None) is NotRequired:
            hint = typing.get_args(hint)[0]
        docs = [entry for entry in getattr(hint, "__metadata__", ()) if isinstance(entry, Doc)]
        if not docs:
            raise TypeError(f"{cls.__name__}.{name} has no Doc (its unit and meaning)")
        doc, alternatives = docs[0], _alternatives(typing.get_args(hint)[0])
        value = [alternative for alternative in alternatives if alternative is not type(None)][0]
        nested = doc.of if doc.of is not None else _nested(value, doc.key)
        if (typing.get_origin(value) is dict and doc.of is None) != (doc.key is not None):
            raise TypeError(f"{cls.__name__}.{name}: a Doc key goes with a dict[str, ...] field and only there")
        out.append(Field(name, doc.unit, type(None) in alternatives, doc.doc, name in optional, nested))
    derived = tuple(out)
    _CLASS_OF[id(derived)] = cls
    return derived


#: Each derived table's class, by the table's id (tables are cached: one tuple per class).
_CLASS_OF: dict[int, type] = {}


def class_of(table: tuple[Field, ...]) -> type | None:
    """The declared class a table was derived from; None for a table declared otherwise."""
    return _CLASS_OF.get(id(table))


def _alternatives(hint: Any) -> tuple[Any, ...]:
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is Union
    return typing.get_args(hint) if union else (hint,)


def _nested(hint: Any, key: str | None) -> tuple[Field, ...] | Keyed | None:
    """The table a field's value nests: its class's, its list items' class's, or a Keyed."""
    origin = typing.get_origin(hint)
    if origin is list:
        items = [
            alternative for alternative in _alternatives(typing.get_args(hint)[0]) if alternative is not type(None)
        ]
        return _nested(items[0], None) if items and typing.is_typeddict(items[0]) else None
    if origin is dict and key is not None:
        item = typing.get_args(hint)[1]
        return Keyed(key, table(item) if typing.is_typeddict(item) else None)
    return table(hint) if typing.is_typeddict(hint) else None


def names(table: tuple[Field, ...]) -> tuple[str, ...]:
    return tuple(field.name for field in table)


class Builder:
    """Builds one kind of record (or message) from its table: every required field, null unless
    given, in table order; a name the table does not know is a TypeError."""

    def __init__(self, what: str, table: tuple[Field, ...]):
        self.what = what
        self.names = frozenset(names(table))
        self._order = names(table)
        self._base = {field.name: None for field in table if not field.optional}

    def __call__(self, **values: Any) -> dict[str, Any]:
        if values.keys() <= self._base.keys():  # the common case: no optional field, the table's order
            out = self._base.copy()
            out.update(values)
            return out
        self._check(values)
        return {name: values.get(name) for name in self._order if name in self._base or name in values}

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
        return [path for index, item in enumerate(value) for path in undeclared(table, item, f"{where}[{index}]")]
    if not isinstance(value, dict):
        return []  # a scalar where an object is declared is a type matter, not a key
    by_name = {field.name: field for field in table}
    out = []
    for key, item in value.items():
        field = by_name.get(key)
        if field is None:
            out.append(f"{where}.{key}")
        else:
            out += _undeclared_in(field.of, item, f"{where}.{key}")
    return out


def _undeclared_in(nested: tuple[Field, ...] | Keyed | None, value: object, where: str) -> list[str]:
    if isinstance(value, list):
        return [path for index, item in enumerate(value) for path in _undeclared_in(nested, item, f"{where}[{index}]")]
    if not isinstance(value, dict):
        return []
    if nested is None:  # an object where the format declares a plain value: all of its keys are news
        return [f"{where}.{key}" for key in value]
    if isinstance(nested, Keyed):
        return [path for key, item in value.items() for path in _undeclared_in(nested.of, item, f"{where}.{key}")]
    return undeclared(nested, value, where)
