"""``stalled_stream``: no new record for max(min_seconds, gap_factor x the median gap).

Live, :meth:`tick` notices the silence as it happens. In a file read after the fact, a gap
between two records shows a stall that ended (the record after it fires), and :meth:`finish`
reports a file whose last record is old and that has no ``run_end``. A silence is reported once,
however it is noticed. Gaps across a resume (a new segment), after ``run_end`` or before a
``run_start`` are restarts, not stalls.

Live, the silence is measured from when the last record *arrived* (:meth:`arrived`) when the
caller says so: a record's own timestamp comes from the writer's clock, which may be skewed (a
writer on another machine over NFS) or replayed (an old log copied in now), and a stall judged
by it can fire the moment a record arrives. The record timestamps still tell the gaps between
records (the same live and after the fact) and judge a log that was already silent when watching
began, until a record arrives while we watch.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from functools import lru_cache

import numpy as np

from trainwatch.humanize import fmt_duration
from trainwatch.rules.config.models import StreamConfig
from trainwatch.rules.detectors.stats import median
from trainwatch.rules.engine.alert import Cause
from trainwatch.rules.engine.base import Context, Frame, Hit, Rule, rank_causes

_STARTS = ("run_start", "resume")
_SMALL = 64
"""Frames of at most this many records (live reads) are first tried with Python floats: a
dozen comparisons cost less than the numpy calls on arrays this short."""
_NO_GAPS = np.empty(0)
"""A new rule's gap history, shared by every engine (read-only: the history is replaced, never
changed in place)."""
_NO_GAPS.flags.writeable = False


@lru_cache(maxsize=16)
def _acting(end_events: tuple[str, ...]) -> frozenset[str]:
    """Event names that end or restart the stream (once per config: every engine asks)."""
    return frozenset((*end_events, *_STARTS))


def _without(gap: np.ndarray, end: int, skip: list[int], w: int) -> np.ndarray:
    """``gap[:end]`` without the rows ``skip`` (sorted, all before ``end``), or at least its last
    ``w`` values: a slice after the skipped rows when they allow (the usual case: only row 0, the
    gap into the frame's first record, is skipped)."""
    if not skip:
        return gap[:end]
    if skip[-1] == len(skip) - 1 or end - skip[-1] - 1 >= w:
        return gap[skip[-1] + 1:end]
    return np.delete(gap[:end], skip)


def _ranked_causes(ended: bool) -> tuple[Cause, ...]:
    return rank_causes([
        (("a hang: a collective waiting on a dead or slow rank (NCCL), or a dead data-loader "
          "worker"), 0.4),
        ("the process crashed or was killed (OOM killer, preemption)", 0.5 if not ended else 0.1),
        ("a long pause: a checkpoint to slow storage, a long evaluation",
         0.3 if not ended else 0.5),
    ])


_CAUSES = {ended: _ranked_causes(ended) for ended in (False, True)}
"""stalled_stream's causes, ranked once, by whether the stream went on after the gap."""
_FIXES = ("Check the process (ps, nvidia-smi) and the end of console.log",
          "py-spy dump --pid PID shows where a hung process is stuck",
          ("Give collectives a timeout (init_process_group(timeout=...)) so a hang becomes an "
           "error"))


class StalledStreamRule(Rule):
    id = "stalled_stream"
    fast = True
    """A small frame that cannot fire (:meth:`_quiet`, the usual live read) only joins a run of
    record times; without an end event in the frame or carried, skip the general end/restart
    bookkeeping; when the invalid gaps are a few known rows (the usual case), no whole-frame
    masks (tests turn it off to compare)."""

    def __init__(self, cfg: StreamConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.last_time: float | None = None
        self.last_step = 0
        self.last_pos = 0
        self._gaps = _NO_GAPS
        """The last ``gap_window`` valid gaps, up to the start of ``_run``."""
        self._run: list[float] = []
        """Record times after ``_gaps`` whose successive differences are all valid gaps, not
        yet folded into ``_gaps`` (quiet small frames only extend it: see :meth:`_quiet`)."""
        self._tail: Frame | None = None
        """The last frame taken by :meth:`_quiet`, whose last record ``last_step`` and
        ``last_pos`` are not yet read from (see :meth:`_settle`)."""
        self._acting = _acting(cfg.end_events)
        """Event names that end or restart the stream (other events leave it running)."""
        self._memo: tuple[np.ndarray, float, float] | None = None
        """(``_gaps``, its limit and median) as :meth:`_current_limit` last computed them."""
        self.finished = False
        self.announced = False
        """A start event was seen: this writer promises a ``run_end`` (framework logs never do)."""
        self.reported_for: float | None = None
        """Time of the last record before the silence already reported."""
        self.watch_start: float | None = None
        """``now`` of the first live tick: when someone started watching."""
        self.last_arrival: float | None = None
        """When the last record arrived (the caller's clock); None: not known, the record's own
        timestamp stands in."""
        self.arrived_while_watching = False
        """A record arrived at or after ``watch_start``: the log is live, not a backlog."""

    def rewind(self) -> None:
        self._settle()
        self.last_time = None  # the gap before a resume is a restart

    @property
    def gaps(self) -> np.ndarray:
        """The last ``gap_window`` valid gaps (the median's window, see :meth:`_limit`)."""
        self._settle()
        return self._gaps

    def _settle(self) -> None:
        """What :meth:`_quiet` left pending, done before anything reads the state: the run of
        record times folded into ``_gaps`` (their differences, computed as the array path
        computes them: bit for bit the same gaps), and the last record's step and position."""
        tail = self._tail
        if tail is not None:
            self.last_step = int(tail.rec_steps[-1])
            self.last_pos = int(tail.rec_pos[-1])
            self._tail = None
        run = self._run
        if len(run) > 1:
            a = np.array(run)
            self._keep_gaps(a[1:] - a[:-1])
        run.clear()

    def _keep_gaps(self, g: np.ndarray) -> None:
        """Add the valid gaps ``g`` (in order) to the history: only its last ``gap_window``."""
        w = self.cfg.gap_window
        self._gaps = g[-w:] if g.shape[0] >= w else np.concatenate((self._gaps, g))[-w:]

    def _quiet(self, frame: Frame, n: int) -> bool:
        """A small frame that cannot fire, taken with Python floats: True when every record
        time is finite and in order from the last one, the whole frame within ``min_seconds``
        of it (so no gap exceeds it, and the limit is at least that), and no event ends or
        restarts the stream. Its gaps are then all valid: the times join ``_run``."""
        last = self.last_time
        if last is None or self.finished:
            return False
        for ev in frame.events:
            if ev.name in self._acting:
                return False
        tl = frame.rec_times.tolist()
        # (sum: NaN or inf if any time is; sorted() and == could pass over a NaN)
        if not (last <= tl[0] and tl[-1] - last <= self.cfg.min_seconds
                and math.isfinite(sum(tl)) and (n == 1 or tl == sorted(tl))):
            return False
        run = self._run
        if not run:
            run.append(last)
        run.extend(tl)
        w = self.cfg.gap_window
        if len(run) > 2 * w + 1:
            # only the last w gaps can count: they are all in the run
            del run[:-w - 1]
            self._gaps = np.empty(0)
        self.last_time = tl[-1]
        self._tail = frame
        return True

    def _current_limit(self) -> tuple[float, float]:
        """:meth:`_limit` of the gap history, remembered while the history is the same array (a
        live tick asks every second; an idle or stalled run brings no record in between)."""
        self._settle()
        memo = self._memo
        if memo is None or memo[0] is not self._gaps:  # (the history is replaced, never changed)
            memo = self._memo = (self._gaps, *self._limit(self._gaps))
        return memo[1], memo[2]

    def _limit(self, gaps: np.ndarray) -> tuple[float, float]:
        cfg: StreamConfig = self.cfg
        med = median(gaps[-cfg.gap_window:]) if gaps.shape[0] else math.nan
        lim = cfg.min_seconds if not math.isfinite(med) else max(cfg.min_seconds,
                                                                  cfg.gap_factor * med)
        return lim, med

    def update(self, frame: Frame) -> list[Hit]:
        cfg: StreamConfig = self.cfg
        t = frame.rec_times
        n = int(t.shape[0])
        if n == 0:
            return []
        if self.fast and n <= _SMALL and self._quiet(frame, n):
            return []
        self._settle()
        last = np.nan if self.last_time is None else self.last_time
        gap = np.empty(n)
        gap[0] = t[0] - last
        np.subtract(t[1:], t[:-1], out=gap[1:])
        cleared: list[int] = []  # rows whose gap is a restart, not a stall (see _ends)
        ev_names = [ev.name for ev in frame.events]
        names = set(ev_names)
        if self.finished or not self.fast or not names.isdisjoint(cfg.end_events):
            self._ends(frame, cleared, ev_names)
        elif not names.isdisjoint(_STARTS):
            # no end event, none carried: a (re)start event is a restart, other events and
            # metric records leave the stream running
            rows = frame.rec_is_event.nonzero()[0].tolist()
            for row, ev in zip(rows, frame.events):
                if ev.name in _STARTS:
                    cleared.append(row)
                    self.announced = True
        # a gap counts when finite, >= 0 and not cleared. Usually every gap after the first is
        # (their minimum is >= 0, not NaN; then only the last can be inf): the invalid rows are
        # then a few known ones, and no whole-frame mask is built
        if self.fast and (n == 1 or (float(gap[1:].min()) >= 0 and math.isfinite(gap[-1]))):
            bad = set(cleared)
            if not (gap[0] >= 0 and math.isfinite(gap[0])):
                bad.add(0)
            hits = self._stalls(frame, gap, last, sorted(bad))
        else:
            valid = np.isfinite(gap) & (gap >= 0)
            valid[cleared] = False
            hits = self._stalls_masked(frame, gap, last, valid)
        self.last_time = float(t[-1])
        self.last_step = int(frame.rec_steps[-1])
        self.last_pos = int(frame.rec_pos[-1])
        return hits

    def _stalls(self, frame: Frame, gap: np.ndarray, last: float, bad: list[int]) -> list[Hit]:
        """The gaps that fire, and the gap history moved on, when the invalid gaps are the rows
        ``bad`` (sorted, few): :meth:`_stalls_masked` without the masks."""
        cfg: StreamConfig = self.cfg
        w, n = cfg.gap_window, gap.shape[0]
        hits: list[Hit] = []
        cand = (gap > cfg.min_seconds).nonzero()[0].tolist()
        for i in cand:
            if bad and i in bad:
                continue
            # the valid gaps before i: only the last gap_window count (see _limit)
            seg = _without(gap, i, bad[:bisect_left(bad, i)], w)
            before = seg[-w:] if seg.shape[0] >= w else np.concatenate((self._gaps, seg))
            self._judge(frame, i, gap, last, before, hits)
        self._keep_gaps(_without(gap, n, bad, w))
        return hits

    def _stalls_masked(self, frame: Frame, gap: np.ndarray, last: float, valid: np.ndarray
                       ) -> list[Hit]:
        """The gaps that fire (``valid`` ones over the limit), and the gap history moved on."""
        cfg: StreamConfig = self.cfg
        n = gap.shape[0]
        hits: list[Hit] = []
        cand = (valid & (gap > cfg.min_seconds)).nonzero()[0]
        if cand.shape[0]:
            vg = gap[valid]
            vidx = valid.nonzero()[0]
            for i in cand.tolist():
                self._judge(frame, i, gap, last, np.concatenate([self._gaps, vg[vidx < i]]), hits)
        self._keep_gaps(gap if np.count_nonzero(valid) == n else gap[valid])
        return hits

    def _judge(self, frame: Frame, i: int, gap: np.ndarray, last: float, before: np.ndarray,
               hits: list[Hit]) -> None:
        """Gap i (valid, over min_seconds) against the limit of the valid gaps ``before`` it."""
        t = frame.rec_times
        prev = last if i == 0 else float(t[i - 1])
        lim, med = self._limit(before)
        if gap[i] > lim and self.reported_for != prev:
            self.reported_for = prev
            step = int(frame.rec_steps[i - 1]) if i > 0 else self.last_step
            hits.append(self._hit(int(frame.rec_pos[i]), step, prev, float(gap[i]), lim, med,
                                  ended=True))

    def _ends(self, frame: Frame, cleared: list[int], ev_names: list[str] | None = None
              ) -> None:
        """Events that end or restart the stream: a gap after an end event (until the next metric
        record or start event) or before a start event is not a stall. Appends those rows to
        ``cleared`` (in order); updates ``finished`` and ``announced``.

        ``finished`` after a record is True after an end event, False after a metric record or a
        (re)start event, unchanged after other events (checkpoint, eval); the gap *into* a record
        is not a stall when ``finished`` held after the record before it. Only events change it
        otherwise than to False, and a frame holds few of them: a walk over the events
        (``ev_names``: their names, if the caller has them)."""
        cfg: StreamConfig = self.cfg
        n = frame.rec_is_event.shape[0]
        fin = self.finished
        prev = -1
        rows = frame.rec_is_event.nonzero()[0].tolist()
        names = (ev_names if ev_names is not None else [ev.name for ev in frame.events])
        names = names[:len(rows)]
        names += [""] * (len(rows) - len(names))  # an event row without its event: another event
        i0 = 0
        if self.fast and not fin:
            # until the first end event only (re)start events act (the walk below would only
            # clear their rows): skip to it
            for name in names:
                if name in cfg.end_events:
                    break
                if name in _STARTS:
                    cleared.append(rows[i0])
                    self.announced = True
                i0 += 1
            if i0:
                prev = rows[i0 - 1]
                rows, names = rows[i0:], names[i0:]
        for row, name in zip(rows, names):
            if row > prev + 1:  # metric records in between: the first one ends a finished run
                if fin:
                    cleared.append(prev + 1)
                fin = False
            elif fin:
                cleared.append(row)
            if name in cfg.end_events:
                fin = True
            elif name in _STARTS:
                if not (cleared and cleared[-1] == row):
                    cleared.append(row)
                fin = False
                self.announced = True
            prev = row
        if prev + 1 < n:
            if fin:
                cleared.append(prev + 1)
            fin = False
        self.finished = fin

    def arrived(self, now: float | None) -> None:
        """The records just fed arrived at ``now`` (None: when is not known)."""
        self.last_arrival = now
        if now is not None and self.watch_start is not None and now >= self.watch_start:
            self.arrived_while_watching = True

    def _silence(self, now: float, *, at_end: bool, since: float | None = None) -> list[Hit]:
        """A silence from ``since`` (the last record's arrival; default its own timestamp)."""
        if self.last_time is None or self.finished or self.reported_for == self.last_time:
            return []
        lim, med = self._current_limit()  # (settles last_step and last_pos too)
        silence = now - (self.last_time if since is None else since)
        if silence <= lim:
            return []
        self.reported_for = self.last_time
        return [self._hit(self.last_pos, self.last_step, self.last_time, silence, lim, med,
                          ended=False, at_end=at_end, arrival=since)]

    def tick(self, now: float) -> list[Hit]:
        if self.watch_start is None:
            self.watch_start = now
        if self.last_time is not None and not self.announced and not self.arrived_while_watching:
            # a log that was already silent when we started watching (yesterday's TensorBoard
            # file) ended before us: the header shows it as idle; only a silence that begins
            # while we watch, or a writer that promised a run_end, is a stall. Until a record
            # arrives while we watch, only the records' own clock can tell.
            lim, _med = self._current_limit()
            if self.last_time + lim < self.watch_start:
                return []
        return self._silence(now, at_end=False, since=self.last_arrival)

    def finish(self, now: float) -> list[Hit]:
        # A missing run_end only means something from a writer that promised one: a TensorBoard
        # or HF file that simply ended long ago is a finished run, not a stalled one.
        if not self.announced:
            return []
        return self._silence(now, at_end=True)

    def _hit(self, pos: int, step: int, last_time: float, silence: float, lim: float, med: float,
             *, ended: bool, at_end: bool = False, arrival: float | None = None) -> Hit:
        cfg: StreamConfig = self.cfg
        usual = f" (the usual gap is {fmt_duration(med)})" if math.isfinite(med) else ""
        if at_end:
            message = (f"The stream ends at step {step}, {fmt_duration(silence)} before now, with "
                       f"no {cfg.end_events[0] if cfg.end_events else 'end'} event: the run "
                       "crashed, was killed, or is hung.")
        elif ended:
            message = (f"No new record for {fmt_duration(silence)} after step {step}{usual}: the "
                       "run stalled, then went on.")
        else:
            message = (f"No new record for {fmt_duration(silence)} after step {step}{usual}: the "
                       "run has stalled, hung or died.")
        causes, fixes = _CAUSES[bool(ended)], _FIXES
        evidence = {"last_record_time": last_time, "silence_s": round(silence, 3),
                    "limit_s": round(lim, 3),
                    "median_gap_s": round(med, 4) if math.isfinite(med) else None}
        if arrival is not None:  # measured on the watcher's clock, not the writer's
            evidence["last_arrival_time"] = arrival
        return self.alert(pos=pos, severity=cfg.severity, step=step, time=last_time + lim,
                          metric=None, message=message, evidence=evidence, causes=causes,
                          fixes=fixes)
