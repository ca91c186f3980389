"""The hostile-text probe (``--probe-texts``): once the sweep (and a soak) is done, a few texts of
each class real users send and a server must guard against, at concurrency 1 and then at the
level the sweep recommends, each text sent :func:`rounds` times per level on each node. The probe's
steps (phase ``probe``) are left out of the sweep's figures; the dashboard says per class what
the server did (:mod:`analysis.probe`).

The classes are :data:`runformat.probe.CLASSES`; ``invalid-utf8`` goes in HTTP JSON bodies only
(bytes that are not UTF-8 where the body's text belongs: every other protocol carries text as
Unicode strings, which cannot hold them).
"""

from __future__ import annotations

import logging
import math

from tts_knee import runformat
from tts_knee.runformat.probe import BYTES_ONLY, CLASSES, class_of

from .inputs.corpus import Text, tier_of

log = logging.getLogger("tts_knee.probe")
#: Times each probe text is sent at each probe level.
ROUNDS = 2


def rounds(n_texts: int, level: int) -> int:
    """How many times a node sends each of its ``n_texts`` probe texts at concurrency ``level``:
    ``ROUNDS``, or more where that keeps every user busy twice."""
    return max(ROUNDS, math.ceil(2 * level / max(1, n_texts)))


class ProbeError(ValueError):
    """``--probe-texts`` names no class it knows."""


def parse(spec: str | None) -> tuple[str, ...]:
    """The classes ``--probe-texts`` names (``all``: every one), in :data:`CLASSES` order; ()
    without the option."""
    if spec is None:
        return ()
    names = [part.strip() for part in spec.split(",") if part.strip()]
    if not names or names == ["all"]:
        return tuple(CLASSES)
    unknown = [name for name in names if name not in CLASSES]
    if unknown:
        raise ProbeError(
            f"--probe-texts names {', '.join(map(repr, unknown))}, which is not a class of text; "
            f"the classes are {', '.join(CLASSES)} (or all)"
        )
    return tuple(name for name in CLASSES if name in names)


def texts(classes: tuple[str, ...], http_json: bool) -> list[Text]:
    """The probe's texts for ``classes``, ids ``probe:CLASS:N``; a bytes-only class is left out
    (and logged) unless the request is an HTTP JSON body."""
    out = []
    for name in classes:
        if name in BYTES_ONLY and not http_json:
            log.warning(
                "probe: %s is sent in HTTP JSON bodies only; this run's protocol carries text as "
                "Unicode strings, so it is left out",
                name,
            )
            continue
        out += [
            Text(f"probe:{name}:{number}", probe_text, tier_of(probe_text))
            for number, probe_text in enumerate(CLASSES[name][1], 1)
        ]
    return out


class Probe:
    """The probe of one run: its texts at concurrency 1, then at the level the sweep recommends
    (where that is above 1: the records judged as the dashboard judges them)."""

    def __init__(self, texts: list[Text]):
        self.texts = texts
        self._levels: list[int] | None = None

    @classmethod
    def of(cls, settings) -> Probe | None:
        """The run's probe from its ``settings``, or None without ``--probe-texts``."""
        return cls(settings.probe_texts) if settings.probe_texts else None

    def requests_at(self, level: int, nodes: int = 1) -> int:
        """How many finished requests end a probe step at ``level`` over ``nodes`` nodes sending
        (the workers of a distributed run): each node sends every text :func:`rounds` times."""
        return len(self.texts) * rounds(len(self.texts), level) * max(1, nodes)

    def longest_s(self, level: int, settings) -> float:
        """A probe step's bound in time under the run's ``settings``: every request it waits for
        running to its timeout, each retry too, its users sharing them; it ends sooner once they
        have finished."""
        retry = settings.retry
        per_request = settings.request_timeout * retry.max_attempts + retry.max_ms / 1000 * (retry.max_attempts - 1)
        return self.requests_at(level) * per_request / max(1, level) + settings.step_time

    def next(self, run):
        """The probe's next step (a :class:`~locustfiles.plan.Planned` of phase ``probe``), or
        None once both levels have been handed out."""
        from .plan import Planned

        if self._levels is None:
            self._levels = [1]
            level = _recommended(run)
            if level is not None and level > 1:
                self._levels.append(level)
            log.info(
                "probe: %d texts of %d classes at concurrency %s",
                len(self.texts),
                len({class_of(probe_text.id) for probe_text in self.texts}),
                " then ".join(map(str, self._levels)),
            )
        if not self._levels:
            return None
        return Planned(self._levels.pop(0), runformat.PROBE_PHASE, 1)


def _recommended(run) -> int | None:
    """The concurrency the sweep's records recommend (as the soak's level is chosen), or None."""
    from .soak import recommended_level

    level = recommended_level(run, "probe", "the probe runs at concurrency 1 only")
    return None if level is None else int(level)
