"""GPUs read from NVIDIA's dcgm-exporter instead of NVML (``--dcgm URL``).

dcgm-exporter publishes one gauge per DCGM field and GPU, labelled ``gpu`` (index), ``UUID``,
``modelName`` (and ``device``, ``Hostname``, ``GPU_I_ID`` for a MIG instance). They become the
same ``gpus`` entries NVML gives, in base units:

- ``util_percent`` from ``DCGM_FI_DEV_GPU_UTIL`` (%), ``power_w`` from ``DCGM_FI_DEV_POWER_USAGE``
  (W), ``temp_c`` from ``DCGM_FI_DEV_GPU_TEMP``, ``sm_clock_mhz`` from ``DCGM_FI_DEV_SM_CLOCK``;
- ``mem_used_bytes`` from ``DCGM_FI_DEV_FB_USED`` (MiB); ``mem_total_bytes`` = used + free
  (``DCGM_FI_DEV_FB_FREE``) + reserved (``DCGM_FI_DEV_FB_RESERVED``, where exported) in bytes;
  null unless both used and free are there;
- ``clock_event_reasons`` from ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` (or the older
  ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS``) bitmask, where exported;
- anything not exported, and DCGM's "blank" sentinel values (no data), are null, never 0.

The exporter is scraped on its own thread like any ``--scrape`` endpoint: while it does not
answer, the GPUs last seen stay listed with null readings (a visible gap), and before it ever
answered there are none. This module never touches NVML.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tts_knee.collectors.exposition import ExpositionError
from tts_knee.collectors.nvml import GPU_FIELDS, decode_clock_event_reasons
from tts_knee.collectors.scrape import DEFAULT_TIMEOUT_S, Endpoint

MIB = 1024 * 1024
BLANK_MIN = 0x7FFFFFF0  # DCGM's int32 blanks start here; its int64 and fp64 blanks are larger

FIELDS = {  # DCGM field -> (gpus field, factor)
    "DCGM_FI_DEV_GPU_UTIL": ("util_percent", 1),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1),
}
MEMORY = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")
REASONS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")


def _value(reading: float) -> float | None:
    if reading != reading or abs(reading) >= BLANK_MIN:  # NaN, or a DCGM blank
        return None
    return reading


def _int(reading: float | None) -> int | float | None:
    return int(reading) if reading is not None and float(reading).is_integer() else reading


def gpus_from_text(text: str) -> list[dict[str, Any]]:
    """dcgm-exporter's exposition into ``gpus`` entries, ordered by index (and MIG instance).
    Raises :class:`ExpositionError` for text that is not exposition."""
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # noqa: BLE001 - the parser raises ValueError, IndexError, ...
        raise ExpositionError(
            str(exc).strip().splitlines()[0][:160] if str(exc).strip() else "unreadable text"
        ) from None
    devices: dict[tuple[Any, ...], dict[str, Any]] = {}
    raw: dict[tuple[Any, ...], dict[str, float | None]] = {}
    for fam in families:
        for sample in fam.samples:
            if sample.name not in FIELDS and sample.name not in MEMORY and sample.name not in REASONS:
                continue
            try:
                index = int(sample.labels["gpu"])
            except (KeyError, ValueError):
                continue
            mig = sample.labels.get("GPU_I_ID")
            key = (index, int(mig) if mig and mig.isdigit() else -1)
            if key not in devices:
                devices[key] = {
                    "index": index,
                    "mig_index": None if key[1] < 0 else key[1],
                    "uuid": sample.labels.get("UUID") or None,
                    "name": sample.labels.get("modelName") or None,
                    "lost": False,
                    **dict.fromkeys(GPU_FIELDS),
                }
            raw.setdefault(key, {})[sample.name] = _value(float(sample.value))
    for key, dev in devices.items():
        got = raw[key]
        for field, (name, factor) in FIELDS.items():
            reading = got.get(field)
            dev[name] = None if reading is None else _int(reading * factor)
        used, free = got.get("DCGM_FI_DEV_FB_USED"), got.get("DCGM_FI_DEV_FB_FREE")
        reserved = got.get("DCGM_FI_DEV_FB_RESERVED") or 0
        dev["mem_used_bytes"] = None if used is None else int(used * MIB)
        dev["mem_total_bytes"] = None if used is None or free is None else int((used + free + reserved) * MIB)
        mask = next((got[reason] for reason in REASONS if got.get(reason) is not None), None)
        dev["clock_event_reasons"] = decode_clock_event_reasons(None if mask is None else int(mask))
    return [devices[device_key] for device_key in sorted(devices)]


class DcgmGpus:
    """The GPU source for :class:`collectors.sampler.Sampler` when ``--dcgm`` is given: the
    same ``available`` and ``sample(pids)`` as :class:`collectors.nvml.Nvml`."""

    def __init__(self, url: str, interval_s: float, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.endpoint = Endpoint(
            url, interval_s, timeout_s, what="dcgm-exporter", convert=lambda text, scraped_at: gpus_from_text(text)
        )
        self._known: list[dict[str, Any]] = []

    @property
    def available(self) -> bool:
        return self.endpoint.state == "ok"

    def start(self) -> None:
        self.endpoint.start()

    def shutdown(self) -> None:
        self.endpoint.stop()

    def sample(self, pids: set[int] | None = None) -> list[dict[str, Any]]:
        """The GPUs of the latest fresh scrape; the last seen ones with null readings when
        there is none (``pids`` is ignored: dcgm-exporter does not say per process)."""
        gpus = self.endpoint.latest()
        if gpus is not None:
            self._known = [{field: gpu[field] for field in ("index", "mig_index", "uuid", "name")} for gpu in gpus]
            return [dict(gpu) for gpu in gpus]
        return [dict(gpu, lost=False, **dict.fromkeys(GPU_FIELDS)) for gpu in self._known]
