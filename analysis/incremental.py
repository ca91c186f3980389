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


def percentiles(s: np.ndarray, qs: npt.ArrayLike) -> np.ndarray:
    """``np.percentile(values, qs)`` from the values sorted (``s``), by the same arithmetic:
    numpy's linear method, its virtual index and its interpolation, so the figures are the
    same to the last bit."""
    q = np.true_divide(np.asarray(qs, dtype=float), 100)
    n = len(s)
    virtual = (n - 1) * q
    below = np.floor(virtual)
    gamma = virtual - below
    lo = below.astype(np.intp)
    hi = np.minimum(lo + 1, n - 1)
    a, b = s[lo], s[hi]
    diff = b - a
    out = a + diff * gamma
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5)
    return np.asarray(out)


def sorted_values(a: Attempts, key: Hashable, values: np.ndarray, mask: np.ndarray) -> np.ndarray | None:
    """The finite ``values[mask]``, sorted, kept under ``key`` and merged with only the rows
    appended since the last call; None when the attempts are not a live reader's."""
    if a.lasting is None:
        return None
    n = len(values)
    got = a.lasting.get(key)
    rows, s = got if got is not None and got[0] <= n else (0, _EMPTY)
    new = values[rows:][mask[rows:]]
    new = np.sort(new[np.isfinite(new)])
    if len(new):
        s = np.insert(s, np.searchsorted(s, new), new)
    a.lasting[key] = (n, s)
    return s
