"""Figures kept up to date as a run directory grows, for the live view (``--serve``).

An exact percentile over many rows costs a sort or a partition of all of them: at a million
attempts that was most of a refresh. A live reader only ever appends rows
(:class:`runformat.reader.RequestLog` with ``live``), so what a figure needs of the rows read
so far can be kept in the attempts' ``lasting`` memo and brought up to date with the rows read
since: the finite values a mask selects, kept sorted (:func:`sorted_values`), from which the
percentiles come by numpy's own arithmetic (:func:`percentiles`). A mask given under one key
must select each row the same way every time (it may depend on the row's own fields, its step,
and whatever else the key names). Without a live reader (``lasting`` None) nothing is kept and
the callers compute from scratch, with the same results.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np
import numpy.typing as npt

from tts_knee.runformat.reader import Attempts

_EMPTY = np.empty(0)


def percentiles(ordered: np.ndarray, wanted: npt.ArrayLike) -> np.ndarray:
    """``np.percentile(values, wanted)`` from the values sorted (``ordered``), by the same arithmetic:
    numpy's linear method, its virtual index and its interpolation, so the figures are the
    same to the last bit."""
    fractions = np.true_divide(np.asarray(wanted, dtype=float), 100)
    count = len(ordered)
    virtual = (count - 1) * fractions
    below = np.floor(virtual)
    gamma = virtual - below
    below_index = below.astype(np.intp)
    above_index = np.minimum(below_index + 1, count - 1)
    below_value, above_value = ordered[below_index], ordered[above_index]
    diff = above_value - below_value
    out = below_value + diff * gamma
    np.subtract(above_value, diff * (1 - gamma), out=out, where=gamma >= 0.5)
    return np.asarray(out)


def sorted_values(attempts: Attempts, key: Hashable, values: np.ndarray, mask: np.ndarray) -> np.ndarray | None:
    """The finite ``values[mask]``, sorted, kept under ``key`` and merged with only the rows
    appended since the last call; None when the attempts are not a live reader's."""
    if attempts.lasting is None:
        return None
    count = len(values)
    got = attempts.lasting.get(key)
    rows, ordered = got if got is not None and got[0] <= count else (0, _EMPTY)
    new = values[rows:][mask[rows:]]
    new = np.sort(new[np.isfinite(new)])
    if len(new):
        ordered = np.insert(ordered, np.searchsorted(ordered, new), new)
    attempts.lasting[key] = (count, ordered)
    return ordered
