"""Prometheus text exposition into flat ``{series: value}`` readings, counters as rates.

Parsing is prometheus_client's; this module decides what a series is called and what its
value means:

- A series is named as in the exposition: ``name`` alone, or ``name{label="v",...}`` with the
  labels in the order the exposition gives them (values escaped as the format escapes them).
- Gauges (and untyped series) keep their value.
- Counters, and untyped series whose name ends in ``_total``, become per-second rates under
  their own name: the rise since the previous scrape divided by the time that actually passed
  between the two scrapes. The first scrape of a counter, one that went down (the server
  restarted), and the first after a gap (more than ``max_gap_s`` since the previous scrape that
  read it: failed scrapes in between) give no rate: the series is absent from that reading,
  never 0, rather than an average over the gap stood at its end.
- Histograms and summaries keep only ``NAME_count`` and ``NAME_sum`` (as rates) and add
  ``NAME_mean``: sum rate / count rate, the mean observation over the interval (absent when
  nothing was observed in it). Buckets, quantiles and ``_created`` series are left out.
- Info and state-set families, and NaN or infinite values, are left out.

:class:`Reader` keeps the counter state of one endpoint and applies the selection
(``match``, a regular expression searched in the series name) and the cap on series.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tts_knee.runformat.metric_roles import role_of

DEFAULT_MAX_SERIES = 200


class ExpositionError(ValueError):
    """The text is not Prometheus text exposition; the message says where, briefly."""


@dataclass(frozen=True)
class Sample:
    """One series of one scrape: ``key`` its name, ``family`` the metric family, ``kind``
    ``gauge`` or ``counter``, ``mean_of`` the histogram/summary family a ``_sum``/``_count``
    belongs to (None otherwise)."""

    key: str
    family: str
    kind: str
    value: float
    mean_of: str | None = None
    labels: tuple[Any, ...] = ()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def series_key(name: str, labels: dict[str, Any]) -> str:
    """``name`` or ``name{k="v",...}`` as the exposition writes it."""
    if not labels:
        return name
    return (
        name + "{" + ",".join(f'{label}="{_escape(str(label_value))}"' for label, label_value in labels.items()) + "}"
    )


_SUFFIXES = ("_total", "_created", "_count", "_sum", "_bucket", "_gcount", "_gsum")


def _declared_kind(name: str, declared: dict[str, str]) -> str:
    """The kind a sample's family was declared with, looking through the sample suffixes
    (some exposition declares ``# TYPE foo counter`` and writes ``foo_total``)."""
    if name in declared and declared[name] != "unknown":
        return declared[name]
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and declared.get(name[: -len(suffix)], "unknown") != "unknown":
            return declared[name[: -len(suffix)]]
    return "unknown"


def parse(text: str) -> list[Sample]:
    """The series of one scrape (see the module doc). Raises :class:`ExpositionError`."""
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # noqa: BLE001 - the parser raises ValueError, IndexError, ...
        raise ExpositionError(_first_line(str(exc))) from None
    declared = {family.name: family.type for family in families}
    written = _names_written(text)
    out: list[Sample] = []
    for fam in families:
        for sample in fam.samples:
            kind = fam.type if fam.type != "unknown" else _declared_kind(sample.name, declared)
            value = float(sample.value)
            if not math.isfinite(value) or sample.name.endswith("_created"):
                continue
            labels = dict(sample.labels)
            name = sample.name
            if kind == "counter" and name not in written and name.endswith("_total"):
                name = name[: -len("_total")]  # the parser adds _total; keep the server's name
            key = series_key(name, labels)
            if kind in ("counter",) or (kind == "unknown" and sample.name.endswith("_total")):
                out.append(Sample(key, fam.name, "counter", value))
            elif kind in ("histogram", "summary", "gaugehistogram"):
                base = fam.name if fam.type != "unknown" else sample.name.rsplit("_", 1)[0]
                if sample.name.endswith(("_count", "_sum")):
                    gauge = kind == "gaugehistogram"
                    out.append(
                        Sample(
                            key,
                            fam.name,
                            "gauge" if gauge else "counter",
                            value,
                            mean_of=base,
                            labels=tuple(labels.items()),
                        )
                    )
                elif sample.name.endswith(("_gcount", "_gsum")):
                    out.append(Sample(key, fam.name, "gauge", value))
            elif kind in ("gauge", "unknown"):
                out.append(Sample(key, fam.name, "gauge", value))
    return out


def _names_written(text: str) -> set[str]:
    """The sample names as the text writes them."""
    names = set()
    for line in text.splitlines():
        line = line.lstrip()
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(None, 1)[0])
    return names


def _first_line(message: str) -> str:
    line = (message or "unreadable text").strip().splitlines()[0] if message.strip() else "unreadable text"
    return line[:160]


class Reader:
    """Turns successive scrapes of one endpoint into readings (see the module doc).

    ``match`` selects series by a regular expression searched in their name; at most
    ``max_series`` are kept, series with a known meaning (see :mod:`runformat.metric_roles`;
    ``roles``, ``--server-role``'s ``{family: role}``, among them) first, then in exposition order. ``dropped`` says
    how many the cap left out last time.
    """

    def __init__(
        self,
        match: str | None = None,
        max_series: int = DEFAULT_MAX_SERIES,
        max_gap_s: float | None = None,
        roles: dict[str, str] | None = None,
    ):
        self.match = re.compile(match) if match else None
        self.roles = roles  # --server-role: {family: role}, kept first too
        self.max_series = max_series
        self.max_gap_s = max_gap_s
        self.dropped = 0
        self._prev: dict[str, tuple[float, float]] = {}  # counter key -> (value, t)

    def read(self, text: str, t: float) -> dict[str, float | None]:
        """One scrape taken at monotonic time ``t`` into ``{series: value}``."""
        samples = parse(text)
        if self.match is not None:
            samples = [sample for sample in samples if self.match.search(sample.key)]
        samples = self._cap(samples)
        out: dict[str, float | None] = {}
        sums: dict[tuple[Any, ...], dict[str, float | None]] = {}
        prev, self._prev = self._prev, {}
        for sample in samples:
            if sample.kind == "counter":
                self._prev[sample.key] = (sample.value, t)
                value = _rate(prev.get(sample.key), sample.value, t, self.max_gap_s)
            else:
                value = sample.value
            if value is not None:
                out[sample.key] = value
            if sample.mean_of is not None:
                part = "sum" if sample.key.split("{", 1)[0].endswith("_sum") else "count"
                sums.setdefault((sample.mean_of, sample.labels), {})[part] = value
        for (base, labels), parts in sums.items():
            count, total = parts.get("count"), parts.get("sum")
            if count and total is not None:
                out[series_key(base + "_mean", dict(labels))] = total / count
        return out

    def _cap(self, samples: list[Sample]) -> list[Sample]:
        keys: list[str] = []
        for sample in samples:  # a histogram's _sum and _count count as one series
            key = sample.key if sample.mean_of is None else series_key(sample.mean_of, dict(sample.labels))
            if not keys or keys[-1] != key:
                keys.append(key)
        unique = list(dict.fromkeys(keys))
        if len(unique) <= self.max_series:
            self.dropped = 0
            return samples
        known = [key for key in unique if role_of(key.split("{", 1)[0], self.roles)]
        keep = set((known + [key for key in unique if key not in set(known)])[: self.max_series])
        self.dropped = len(unique) - len(keep)
        return [
            sample
            for sample in samples
            if (sample.key if sample.mean_of is None else series_key(sample.mean_of, dict(sample.labels))) in keep
        ]


def _rate(prev: tuple[float, float] | None, value: float, now: float, max_gap_s: float | None = None) -> float | None:
    """Per-second rise since ``prev`` (value, t); None on the first scrape, a reset, or after
    more than ``max_gap_s``."""
    if prev is None:
        return None
    rise, elapsed_s = value - prev[0], now - prev[1]
    if rise < 0 or elapsed_s <= 0 or (max_gap_s is not None and elapsed_s > max_gap_s):
        return None
    return rise / elapsed_s
