"""Metric lines in plain-text training logs (a ``lines`` reader).

Three dialects, recognised line by line, so one file may mix them:

* **llm.c** ``main.log``: ``s:120 trl:3.2813 lr:0.000600 norm:0.23``, ``s:250 tel:3.27``,
  ``s:250 eval:0.3054``. Keys keep llm.c's names (``trl``, ``tel``, ``norm``, ``eval``).
* **modded-nanogpt**: ``step:500/20000 val_loss:3.28 val_bpb:1.94 train_time:5210ms
  step_avg:10.4ms``. ``N/T`` gives the step and ``meta["max_steps"] = T``.
* **nanoGPT-style**: ``iter 100: loss 2.3000, time 45.00ms, mfu 3.00%``,
  ``step 100: train loss 2.1000, val loss 2.2000``, and variants with a ``[tag]`` prefix,
  ``|`` separators or ``key: value`` / ``key=value`` pairs
  (``step    10 | loss: 10.9 | lr 6.0e-05 | dt: 345.67ms``).

Choices (a metric line's values become series named as the log names them):

* A name made of several words is joined with ``_`` (``train loss`` -> ``train_loss``). A bare
  ``train``/``val``/``valid``/``test`` before a number is that split's loss (nanoGPT's
  ``estimate_loss`` printed tersely: ``[eval] iter 0: train 9.85 val 9.85``) and becomes
  ``train_loss``/``val_loss``...
* Units stay in the numbers as printed and go into the name: ``train_time:5210ms`` ->
  ``train_time_ms``, ``mem:1234MiB`` -> ``mem_mib``, ``11136 ms/iter`` (a number named only by
  its unit) -> ``ms_per_iter``. ``%`` adds nothing (``mfu 3.00%`` -> ``mfu`` = 3.0).
* Names the builder reserves are renamed: nanoGPT's per-iteration ``time`` is ``iter_time``
  (so ``time 45.00ms`` -> ``iter_time_ms``), never the record's clock. A ``step`` pair inside
  the values is the step itself and is skipped.
* A line a progress bar rewrote with ``\\r`` is read part by part.
* Every other line (banners, warnings, config dumps, ``warmup_step:3/20``, summary lines
  without a step) is ignored, not malformed: a text log is mostly not metrics. A step line
  without any number after it is ignored too.
* Text logs have no clock we can trust: record times are the moment we read them.
"""

from __future__ import annotations

import re
import time as _time
from collections.abc import Callable

from trainwatch.builder import BatchBuilder
from trainwatch.formats._textlines import TextLinesReader

_LLMC = re.compile(r"s:(\d+)\s+(.*)")
_MODDED = re.compile(r"step:(\d+)(?:/(\d+))?\s+(.*)")
_NANO = re.compile(
    r"(?:\[[^\]]{1,40}\]\s*)?(?:iter|step|iteration)\s*[:=#]?\s*(\d+)(?:\s*/\s*(\d+))?"
    r"\s*[:|,]\s*(.*)",
    re.IGNORECASE,
)
_SEGMENTS = re.compile(r"[,|]")
_KV = re.compile(r"([^\s:=]+)[:=](\S+)")
_NUMBER = re.compile(
    r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)(%|[A-Za-zµ]+(?:/[A-Za-z]+)?)?"
    r"|([-+]?(?:nan|inf|infinity))",
    re.IGNORECASE,
)
_UNITS = frozenset({
    "ms", "s", "sec", "secs", "us", "µs", "ns", "min", "h", "%",
    "b", "kb", "mb", "gb", "tb", "kib", "mib", "gib", "tib",
})
_SPLIT_LOSS = frozenset({"train", "val", "valid", "validation", "test"})
_RENAMED = {"time": "iter_time", "event": "event_value", "rank": "rank_value"}
_MAX_LINE_BYTES = 1 << 16
"""Longer lines are not metric lines (a dumped tensor, a config): skipped unparsed."""


def _number(tok: str) -> tuple[float, str | None] | None:
    m = _NUMBER.fullmatch(tok)
    if m is None:
        return None
    if m.group(3) is not None:
        return float(m.group(3)), None
    return float(m.group(1)), m.group(2)


def _is_unit(tok: str) -> bool:
    low = tok.lower()
    if low in _UNITS:
        return True
    parts = low.split("/")
    return len(parts) == 2 and all(p.isalpha() and len(p) <= 8 for p in parts)


def _unit_suffix(unit: str) -> str:
    return unit.lower().replace("µ", "u").replace("%", "").replace("/", "_per_")


def _name(key: str, unit: str | None) -> str:
    key = _RENAMED.get(key, key)
    if unit:
        suffix = _unit_suffix(unit)
        if suffix and not key.endswith("_" + suffix):
            key = f"{key}_{suffix}"
    return key


def _plain_pairs(rest: str) -> dict[str, float] | None:
    """Fast path for lines made only of ``key:number`` pairs (llm.c, most modded-nanogpt)."""
    out: dict[str, float] = {}
    for tok in rest.split():
        key, sep, value = tok.partition(":")
        if not sep or key in _RENAMED or key == "step":
            return None
        try:
            out[key] = float(value)
        except ValueError:
            return None
    return out


def parse_values(rest: str) -> dict[str, float]:
    """The named numbers of a metric line after its step prefix (see the module doc)."""
    out: dict[str, float] = {}
    for seg in _SEGMENTS.split(rest):
        toks = seg.split()
        words: list[str] = []
        i = 0
        while i < len(toks):
            tok = toks[i]
            kv = _KV.fullmatch(tok)
            if kv is not None:
                num = _number(kv.group(2))
                if num is not None and kv.group(1).lower() != "step":
                    out[_name(kv.group(1), num[1])] = num[0]
                words = []
                i += 1
                continue
            bare = tok.rstrip(":=")
            num = _number(bare) if bare == tok else None
            if num is None:
                if bare:
                    words.append(bare)
                i += 1
                continue
            value, unit = num
            nxt = toks[i + 1] if i + 1 < len(toks) else None
            after = toks[i + 2] if i + 2 < len(toks) else None
            if unit is None and nxt is not None and _is_unit(nxt) and (
                after is None or _number(after) is None
            ):
                unit = nxt
                i += 1
            if words:
                key = "_".join(words)
                if key.lower() in _SPLIT_LOSS:
                    key = f"{key}_loss"
                if key.lower() != "step":
                    out[_name(key, unit)] = value
            elif unit:
                out[_unit_suffix(unit)] = value
            words = []
            i += 1
    return out


class TextLogReader(TextLinesReader):
    """Parses whole lines of a text training log, keeping only its metric lines."""

    format = "textlog"

    def __init__(self, source: str, *, clock: Callable[[], float] = _time.time) -> None:
        super().__init__(source, clock=clock)
        self._max_steps: int | None = None

    def reset(self) -> None:
        super().reset()
        self._max_steps = None

    def _handle_line(self, raw: bytes, line_no: int, builder: BatchBuilder) -> None:
        if len(raw) > _MAX_LINE_BYTES:
            return
        # a progress bar redraws itself with \r: each part may hold a metric line
        for part in raw.split(b"\r") if b"\r" in raw else (raw,):
            parsed = parse_metric_line(part.decode("utf-8", errors="replace").strip())
            if parsed is None:
                continue
            step, total, dialect, values = parsed
            if total is not None and total != self._max_steps:
                self._max_steps = total
                self._meta["max_steps"] = total
            self._meta.setdefault("dialect", dialect)
            values["step"] = step  # type: ignore[assignment]
            builder.add_record(values, line_no)


def parse_metric_line(line: str) -> tuple[int, int | None, str, dict[str, float]] | None:
    """(step, total steps or None, dialect, values) of a metric line, or None for any other."""
    m = _LLMC.fullmatch(line) if line.startswith("s:") else None
    if m is not None:
        step, total, rest, dialect = m.group(1), None, m.group(2), "llm.c"
    else:
        m = _MODDED.fullmatch(line) if line.startswith("step:") else None
        if m is not None:
            step, total, rest, dialect = m.group(1), m.group(2), m.group(3), "modded-nanogpt"
        else:
            m = _NANO.fullmatch(line)
            if m is None:
                return None
            step, total, rest, dialect = m.group(1), m.group(2), m.group(3), "nanogpt"
    values = _plain_pairs(rest)
    if values is None:
        values = parse_values(rest)
    if not values:
        return None
    return int(step), (int(total) if total else None), dialect, values
