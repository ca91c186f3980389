"""Read a run directory: ``run.json``, ``requests.jsonl`` and ``resources.jsonl``.

Attempt records are parsed line by line into numpy columns (only the fields the dashboard
uses), chunk by chunk, so a million attempts cost a few hundred MB at most and no per-record
dicts are kept.  Readers are incremental: :meth:`RequestLog.update` parses only what was
appended since the last call, which is what the live view needs while a run is being written.

Streaming fields (``ttfa_ms``, ``chunks``, ``gap_max_ms``, ``underruns``, ``underrun_ms``) are
float columns like the others; a value that is not a finite number >= 0 (or, for the counts, not
a whole number) is NaN.  The per-chunk lists ``chunk_at_ms`` / ``chunk_audio_ms`` are not kept:
each row remembers its line's byte offset in ``requests.jsonl`` and how many chunk entries it
carried (``chunk_n``, -1 when the lists are missing or do not match), and
:meth:`RequestLog.chunk_series` re-reads the few lines a figure draws.

Field names and the format come from :mod:`runformat`. It reads run directories of format
versions 1 and 2 (``run.json``'s ``format_version``; none means 1); one of a later version is
refused with one sentence (:attr:`RunDir.format_error`), since its fields may mean other things.

A line that is not a JSON object is skipped and counted in ``bad_lines``.  A last line without
its newline is being written (or was cut by a crash): it is left unparsed and reported as
``incomplete_last_line``; the next update picks it up once it is complete.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

import runformat

READ_BYTES = 8 << 20  # read requests.jsonl in blocks of this size
CHUNK_LINES = 65536  # lines parsed into Python lists before they become numpy arrays
MAX_LABELS = 2000  # distinct error strings / text ids kept; the rest share one label
MAX_STAGES = 32  # distinct Server-Timing stage names kept
OTHER_LABEL = "(other)"
TTFA_FLOOR_MS = 300.0  # --ttfa-floor-ms default, for runs whose run.json does not say


def _attempt_fields(*names: str) -> tuple[str, ...]:
    """Attempt record field names, checked against runformat's table."""
    unknown = set(names) - {f.name for f in runformat.ATTEMPT}
    if unknown:
        raise AssertionError(f"not attempt fields in runformat: {sorted(unknown)}")
    return names


# float columns: name in the record -> column name
_FLOATS = _attempt_fields("t0", "ttfb_ms", "wait_ms", "write_ms", "concat_ms", "audio_s", "rtf",
           "retry_after_s", "backoff_ms", "text_len", "bytes", "scheduled", "sched_wait_ms")
_INTS = _attempt_fields("step", "concurrency", "attempt", "status")  # -1 where missing / null
# streaming figures: NaN unless a finite number >= 0; the counts also whole
_STREAM_MS = _attempt_fields("ttfa_ms", "gap_max_ms", "underrun_ms")
_STREAM_COUNTS = _attempt_fields("chunks", "underruns")


class RunDirError(Exception):
    """A run directory that cannot be analysed; the message is one sentence for the user."""


def _num(v) -> float | None:
    """A finite float, or None for anything else (null, strings, NaN)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _amount(v, whole: bool = False) -> float | None:
    """A finite float >= 0 (a whole one when ``whole``), else None."""
    f = _num(v)
    if f is None or f < 0 or (whole and f != int(f)):
        return None
    return f


class _Labels:
    """Interns strings (error messages, text ids, tiers) to small integer codes."""

    def __init__(self, cap: int = MAX_LABELS):
        self.cap = cap
        self.codes: dict[str, int] = {}
        self.names: list[str] = []

    def code(self, s) -> int:
        if s is None:
            return -1
        s = str(s)[:300]
        c = self.codes.get(s)
        if c is None:
            if len(self.names) >= self.cap:
                s = OTHER_LABEL
                c = self.codes.get(s)
                if c is not None:
                    return c
            c = len(self.names)
            self.codes[s] = c
            self.names.append(s)
        return c


@dataclass
class Attempts:
    """Columnar attempt records (one row per line of ``requests.jsonl``).

    Times: ``t0`` is when the attempt was sent and ``tend`` when it was done (``t3``, else
    ``t2``, else ``t0 + wait_ms``), both unix seconds on the master's clock.  ``e2e_ms`` is set
    on final attempts only: first attempt's ``t0`` to this attempt's ``tend`` (attempts plus
    backoff plus the client's write), NaN elsewhere.
    """

    cols: dict[str, np.ndarray]
    stages: dict[str, np.ndarray]
    errors: list[str]
    texts: list[str]
    tiers: list[str]
    memo: dict = field(default_factory=dict)  # figures derived from these columns, computed once

    def __len__(self) -> int:
        return len(self.cols["t0"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]


class RequestLog:
    """Incremental reader of ``requests.jsonl``."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0  # bytes consumed (complete lines only)
        self.lines = 0
        self.bad_lines = 0
        self.incomplete_last_line = False
        self._chunks: list[dict[str, np.ndarray]] = []
        self._stage_chunks: list[dict[str, np.ndarray]] = []
        self._rows = 0
        self.errors = _Labels()
        self.texts = _Labels()
        self.tiers = _Labels(cap=32)
        self.stage_names: list[str] = []
        self._first_t0: dict[str, float] = {}  # req_id -> t0 of attempt 1, for retried requests
        self._pending: list[tuple[int, str]] = []  # (row, req_id) of final attempts > 1
        self._cache: Attempts | None = None

    def update(self) -> bool:
        """Parse lines appended since the last call; True if anything new was read."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return False
        if size < self.offset:  # file replaced: start over
            self.__init__(self.path)
        if size == self.offset:
            return False
        read_any = False
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            left = size - self.offset
            carry = b""
            while left > 0:
                block = f.read(min(READ_BYTES, left))
                if not block:
                    break
                left -= len(block)
                data = carry + block
                end = data.rfind(b"\n") + 1
                carry = data[end:]
                if end:
                    base = self.offset
                    self.offset += end
                    lines = data[:end].split(b"\n")
                    lines.pop()  # the empty string after the final newline
                    del data
                    for i in range(0, len(lines), CHUNK_LINES):
                        part = lines[i:i + CHUNK_LINES]
                        self._parse(part, base)
                        base += sum(len(x) for x in part) + len(part)
                    read_any = True
        self.incomplete_last_line = bool(carry)
        if not read_any:
            return False
        self._cache = None
        return True

    def _parse(self, lines: list[bytes], base: int) -> None:
        """Parse complete lines; ``base`` is the byte offset of the first one in the file."""
        loads = json.loads
        f = {k: [] for k in _FLOATS + _STREAM_MS + _STREAM_COUNTS}
        ints = {k: [] for k in _INTS}
        tend, final, ok, settled, err, text, tier = [], [], [], [], [], [], []
        offsets, chunk_n = [], []
        stages: dict[str, list[tuple[int, float]]] = {}
        row = self._rows
        pos = base
        for raw in lines:
            self.lines += 1
            at, pos = pos, pos + len(raw) + 1
            if not raw.strip():
                continue
            try:
                r = loads(raw)
            except ValueError:
                self.bad_lines += 1
                continue
            if not isinstance(r, dict):
                self.bad_lines += 1
                continue
            t0 = _num(r.get("t0"))
            wait = _num(r.get("wait_ms"))
            for k in _FLOATS:
                f[k].append(_num(r.get(k)))
            for k in _STREAM_MS:
                f[k].append(_amount(r.get(k)))
            for k in _STREAM_COUNTS:
                f[k].append(_amount(r.get(k), whole=True))
            ca, cm = r.get("chunk_at_ms"), r.get("chunk_audio_ms")
            chunk_n.append(len(ca) if isinstance(ca, list) and isinstance(cm, list) and len(ca) == len(cm)
                           else -1)
            offsets.append(at)
            for k in _INTS:
                v = _num(r.get(k))
                ints[k].append(-1 if v is None else int(v))
            e = _num(r.get("t3"))
            if e is None:
                e = _num(r.get("t2"))
            if e is None and t0 is not None and wait is not None:
                e = t0 + wait / 1000.0
            tend.append(e)
            is_final = r.get("final", True) is not False
            final.append(is_final)
            ok.append(r.get("ok") is True)
            settled.append(r.get("settled", True) is not False)
            err.append(self.errors.code(r.get("error") or None))
            text.append(self.texts.code(r.get("text_id")))
            tier.append(self.tiers.code(r.get("tier")))
            st = r.get("server_timing")
            if isinstance(st, dict):
                for name, ms in st.items():
                    ms = _num(ms)
                    if ms is None:
                        continue
                    name = str(name)[:64]
                    if name not in stages and name not in self.stage_names:
                        if len(self.stage_names) >= MAX_STAGES:
                            continue
                        self.stage_names.append(name)
                    stages.setdefault(name, []).append((row, ms))
            attempt = ints["attempt"][-1]
            rid = r.get("req_id")
            if attempt > 1 and is_final and rid is not None:
                self._pending.append((row, str(rid)))
            elif attempt == 1 and not is_final and rid is not None and t0 is not None:
                self._first_t0[str(rid)] = t0
            row += 1
        n = row - self._rows
        chunk = {k: np.array(v, dtype=float) for k, v in f.items()}
        for k, v in ints.items():
            chunk[k] = np.array(v, dtype=np.int32)
        chunk["tend"] = np.array(tend, dtype=float)
        chunk["final"] = np.array(final, dtype=bool)
        chunk["ok"] = np.array(ok, dtype=bool)
        chunk["settled"] = np.array(settled, dtype=bool)
        chunk["error"] = np.array(err, dtype=np.int32)
        chunk["text"] = np.array(text, dtype=np.int32)
        chunk["tier"] = np.array(tier, dtype=np.int16)
        chunk["offset"] = np.array(offsets, dtype=np.int64)
        chunk["chunk_n"] = np.array(chunk_n, dtype=np.int32)
        st_chunk = {}
        for name, pairs in stages.items():
            a = np.full(n, np.nan)
            idx = np.fromiter((p[0] - self._rows for p in pairs), dtype=np.int64, count=len(pairs))
            a[idx] = [p[1] for p in pairs]
            st_chunk[name] = a
        if n:
            self._chunks.append(chunk)
            self._stage_chunks.append(st_chunk)
        self._rows = row

    def attempts(self) -> Attempts:
        """All attempts read so far as one set of columns (cached until the next update)."""
        if self._cache is not None:
            return self._cache
        lens = [len(c["t0"]) for c in self._chunks]
        if self._chunks:
            cols = {k: np.concatenate([c[k] for c in self._chunks]) for k in self._chunks[0]}
        else:
            cols = {k: np.empty(0) for k in _FLOATS + _STREAM_MS + _STREAM_COUNTS + ("tend",)}
            cols.update({k: np.empty(0, dtype=np.int32) for k in _INTS + ("error", "text", "chunk_n")})
            cols["offset"] = np.empty(0, dtype=np.int64)
            cols.update({k: np.empty(0, dtype=bool) for k in ("final", "ok", "settled")})
            cols["tier"] = np.empty(0, dtype=np.int16)
        stages = {}
        for name in self.stage_names:
            stages[name] = np.concatenate([sc[name] if name in sc else np.full(m, np.nan)
                                           for sc, m in zip(self._stage_chunks, lens)]) \
                if lens else np.empty(0)
        # keep one merged chunk so the next call only concatenates what is new
        if self._chunks:
            self._chunks = [dict(cols)]
            self._stage_chunks = [dict(stages)]
        e2e = np.full(len(cols["t0"]), np.nan)
        fin1 = cols["final"] & (cols["attempt"] <= 1)
        e2e[fin1] = (cols["tend"][fin1] - cols["t0"][fin1]) * 1000.0
        for row, rid in self._pending:
            t0 = self._first_t0.get(rid)
            if t0 is not None:
                e2e[row] = (cols["tend"][row] - t0) * 1000.0
        cols["e2e_ms"] = e2e
        self._cache = Attempts(cols, stages, self.errors.names, self.texts.names, self.tiers.names)
        return self._cache

    def chunk_series(self, row: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(``chunk_at_ms``, ``chunk_audio_ms``) of one attempt, re-read from its line; None when
        the line is gone or its lists are not equal-length lists of finite numbers >= 0."""
        a = self.attempts()
        if not 0 <= row < len(a) or a["chunk_n"][row] < 0:
            return None
        try:
            with open(self.path, "rb") as f:
                f.seek(int(a["offset"][row]))
                r = json.loads(f.readline())
            at = np.asarray(r["chunk_at_ms"], dtype=float)
            audio = np.asarray(r["chunk_audio_ms"], dtype=float)
        except (OSError, ValueError, TypeError, KeyError):
            return None
        if at.ndim != 1 or at.shape != audio.shape or not (np.isfinite(at).all() and np.isfinite(audio).all()) \
                or (at < 0).any() or (audio < 0).any():
            return None
        order = np.argsort(at, kind="stable")
        return at[order], audio[order]


_RES_SCALARS = tuple(f.name for f in runformat.RESOURCE_SAMPLE
                     if f.name in ("cpu_percent", "cpu_max_core_percent", "mem_used_bytes", "mem_total_bytes"))


def read_resources(path: Path) -> tuple[pd.DataFrame, int, bool]:
    """``resources.jsonl`` as one row per sample and GPU summary.

    Columns: ``ts``, ``host``, ``role``, the CPU/memory scalars, ``proc_cpu_percent``,
    ``proc_rss_bytes`` and, over the sample's GPUs, ``gpu_util_percent`` (the busiest GPU),
    ``gpu_mem_used_bytes`` and ``gpu_mem_total_bytes`` (the GPU whose memory is fullest),
    ``gpu_power_w``, ``gpu_count``.  Returns (frame, bad line count, incomplete last line).
    """
    rows, bad = [], 0
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return pd.DataFrame(), 0, False
    end = data.rfind(b"\n") + 1
    incomplete = end < len(data)
    for raw in data[:end].split(b"\n"):
        if not raw.strip():
            continue
        try:
            s = json.loads(raw)
        except ValueError:
            bad += 1
            continue
        ts = _num(s.get("ts")) if isinstance(s, dict) else None
        if ts is None:
            bad += 1
            continue
        row = {"ts": ts, "host": str(s.get("host") or "?"), "role": str(s.get("role") or "server")}
        for k in _RES_SCALARS:
            row[k] = _num(s.get(k))
        proc = s.get("proc") if isinstance(s.get("proc"), dict) else {}
        row["proc_cpu_percent"] = _num(proc.get("cpu_percent"))
        row["proc_rss_bytes"] = _num(proc.get("rss_bytes"))
        gpus = [g for g in (s.get("gpus") or []) if isinstance(g, dict)]
        utils = [u for u in (_num(g.get("util_percent")) for g in gpus) if u is not None]
        row["gpu_util_percent"] = max(utils) if utils else None
        fullest, frac = None, -1.0
        for g in gpus:
            used, total = _num(g.get("mem_used_bytes")), _num(g.get("mem_total_bytes"))
            if used is None:
                continue
            fr = used / total if total else 0.0
            if fr > frac:
                fullest, frac = (used, total), fr
        row["gpu_mem_used_bytes"] = fullest[0] if fullest else None
        row["gpu_mem_total_bytes"] = fullest[1] if fullest else None
        powers = [p for p in (_num(g.get("power_w")) for g in gpus) if p is not None]
        row["gpu_power_w"] = sum(powers) if powers else None
        row["gpu_count"] = len(gpus)
        rows.append(row)
    df = pd.DataFrame(rows)
    if len(df):
        df = df.sort_values("ts", kind="stable").reset_index(drop=True)
    return df, bad, incomplete


@dataclass
class RunDir:
    """One run directory, re-read incrementally by :meth:`refresh`."""

    path: Path
    run: dict = field(default_factory=dict)
    resources: pd.DataFrame = field(default_factory=pd.DataFrame)
    resource_bad_lines: int = 0
    resource_incomplete: bool = False
    run_json_error: str | None = None
    format_error: str | None = None   # why this version cannot read it (runformat.unreadable)

    def __post_init__(self):
        self.path = Path(self.path)
        self.requests = RequestLog(self.path / runformat.REQUESTS)
        self._res_key = None

    def check(self) -> None:
        """Raise :class:`RunDirError` if this is not something that can be a run directory."""
        if not self.path.exists():
            raise RunDirError(f"{self.path} does not exist; pass a run directory written by a tts-knee run.")
        if not self.path.is_dir():
            raise RunDirError(f"{self.path} is not a directory; pass a run directory (runs/<run-id>/).")
        if not (self.path / runformat.RUN_JSON).exists() and not (self.path / runformat.REQUESTS).exists():
            raise RunDirError(f"{self.path} has neither run.json nor requests.jsonl; is it a run directory?")

    def refresh(self) -> bool:
        """Re-read whatever changed on disk; True if anything did."""
        changed = False
        rj = self.path / runformat.RUN_JSON
        try:
            run = json.loads(rj.read_text(encoding="utf-8"))
            if not isinstance(run, dict):
                raise ValueError("not an object")
            self.run_json_error = None
            self.format_error = runformat.unreadable(run)
            changed |= run != self.run
            self.run = run
        except FileNotFoundError:
            self.run_json_error = "run.json is missing"
        except (ValueError, UnicodeDecodeError) as e:
            # keep the last good copy: the writer may be rewriting it right now
            self.run_json_error = f"run.json is not valid JSON ({e})"
        changed |= self.requests.update()
        rp = self.path / runformat.RESOURCES
        try:
            st = rp.stat()
            key = (st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            key = None
        if key != self._res_key:
            self._res_key = key
            self.resources, self.resource_bad_lines, self.resource_incomplete = read_resources(rp)
            changed = True
        return changed

    def has_resources(self) -> bool:
        return (self.path / runformat.RESOURCES).exists() and len(self.resources) > 0

    def options(self) -> dict:
        opts = self.run.get("options")
        return opts if isinstance(opts, dict) else {}

    def streamed(self) -> bool:
        """Whether the run read its responses as streams: ``options.tts_stream`` (or a stream
        format) when run.json says; for runs from before that option, whether any record
        carries chunk arrival times."""
        opts = self.options()
        if "tts_stream" in opts or "tts_stream_format" in opts:
            return opts.get("tts_stream") is True or bool(opts.get("tts_stream_format"))
        return bool((self.requests.attempts()["chunk_n"] >= 0).any())

    def ttfa_floor_ms(self) -> float:
        """``options.ttfa_floor_ms`` (default :data:`TTFA_FLOOR_MS`)."""
        v = _amount(self.options().get("ttfa_floor_ms"))
        return TTFA_FLOOR_MS if v is None else v

    def playback_buffer_ms(self) -> float:
        """``options.playback_buffer_ms`` (default 0)."""
        v = _amount(self.options().get("playback_buffer_ms"))
        return 0.0 if v is None else v
