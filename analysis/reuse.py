"""Text reuse: did the run measure the server, or its cache?

tts-knee sends the same texts at every step on purpose (steps compare on equal work), so a
server that caches its answers (an audio cache, or a model's prefix cache) looks faster than it
is for new text. Every run checks: for each text (with its voice), its first successful first
attempt in the run against its later ones *in the same step*, so that both saw the same load.
The pair's ratio is the later ones' median time over the first's (TTFA for streams, else the
wait for the answer). With at least :data:`MIN_PAIRS` texts repeated, the server caches when
the median ratio is at most :data:`FASTER` and at least :data:`CONSISTENT` of the texts came
back faster; a cold start makes only the run's first few requests slow, not most texts'.

``--text-reuse unique`` (:mod:`locustfiles.inputs.corpus`) sends every request a text of its own, so
nothing repeats and there is nothing to cache.
"""

from __future__ import annotations

import numpy as np

from tts_knee.runformat.reader import Attempts
from tts_knee.runformat.summary import TextReuse

#: Texts repeated within the step they were first sent in, needed to tell.
MIN_PAIRS = 5
#: A repeat at most this share of the first time, at the median: the server caches.
FASTER = 0.5
#: ... and at least this share of the texts faster the second time.
CONSISTENT = 0.8


def text_reuse(attempts: Attempts, streamed: bool, unique: bool = False) -> TextReuse:
    """``{pairs, first_ms, repeat_ms, ratio, faster_share, caches, note}`` (see the module doc);
    ``caches`` None when too few texts repeated to tell; ``unique``: the run sent every request
    a text of its own."""
    col = "ttfa_ms" if streamed else "wait_ms"
    column = attempts[col]
    rows = np.flatnonzero(
        attempts["ok"]
        & (attempts["attempt"] <= 1)
        & (attempts["text"] >= 0)
        & np.isfinite(column)
        & np.isfinite(attempts["t0"])
    )
    out: TextReuse = {
        "pairs": 0,
        "first_ms": None,
        "repeat_ms": None,
        "ratio": None,
        "faster_share": None,
        "caches": None,
        "note": "",  # each way out says why
    }
    firsts, repeats = [], []
    if unique:  # a text id's requests were each a text of their own: none is a repeat
        out["note"] = "Every request had a text of its own (--text-reuse unique): nothing to cache."
        return out
    if len(rows):
        # by text (and voice), then in the order sent; the narrowest integers that hold them
        width = len(attempts.voices) + 2
        small = np.int32 if (len(attempts.texts) + 1) * width < np.iinfo(np.int32).max else np.int64
        rows = rows.astype(small)
        key = np.multiply(attempts["text"][rows], width, dtype=small)
        np.add(key, attempts["voice"][rows].astype(small) + 1, out=key)
        order = np.lexsort((attempts["t0"][rows], key))
        key, rows = key[order], rows[order]
        cuts = np.flatnonzero(np.diff(key)) + 1
        for group in np.split(rows, cuts):
            first = group[0]
            later = group[1:][attempts["step"][group[1:]] == attempts["step"][first]]
            if len(later) and column[first] > 0:
                firsts.append(float(column[first]))
                repeats.append(float(np.median(column[later])))
    what = "TTFA" if streamed else "the wait"
    if len(firsts) < MIN_PAIRS:
        out["note"] = (
            f"Too few texts repeated within the step they were first sent in ({len(firsts)}; "
            f"{MIN_PAIRS} needed) to tell whether the server caches its answers."
        )
        out["pairs"] = len(firsts)
        return out
    first_times, repeat_times = np.array(firsts), np.array(repeats)
    ratio = repeat_times / first_times
    first_ms, repeat_ms = float(np.median(first_times)), float(np.median(repeat_times))
    median_ratio, faster_share = float(np.median(ratio)), float(np.mean(ratio < 1))
    out["pairs"], out["first_ms"], out["repeat_ms"] = len(first_times), first_ms, repeat_ms
    out["ratio"], out["faster_share"] = median_ratio, faster_share
    out["caches"] = median_ratio <= FASTER and faster_share >= CONSISTENT
    if out["caches"]:
        out["note"] = (
            f"The server caches its answers: a text sent again in the same step came back in "
            f"{repeat_ms:.0f} ms against {first_ms:.0f} ms the first time ({what}, median "
            f"ratio {median_ratio:.2f} over {len(first_times)} texts, {int(np.sum(ratio < 1))} of them faster), so "
            f"these figures hold for repeated text; --text-reuse unique measures new text."
        )
    else:
        out["note"] = (
            f"No sign of an answer cache: a text sent again in the same step took {median_ratio:.2f}x "
            f"its first time ({what}, median over {len(first_times)} texts)."
        )
    return out
