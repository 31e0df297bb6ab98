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

import numpy as np

from trainwatch.humanize import fmt_duration
from trainwatch.rules.base import Context, Frame, Hit, Rule
from trainwatch.rules.models import StreamConfig
from trainwatch.rules.stats import median

_STARTS = ("run_start", "resume")


class StalledStreamRule(Rule):
    id = "stalled_stream"
    fast = True
    """Without an end event in the frame or carried, skip the general end/restart bookkeeping
    (tests turn it off to compare)."""

    def __init__(self, cfg: StreamConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.last_time: float | None = None
        self.last_step = 0
        self.last_pos = 0
        self.gaps = np.empty(0)
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
        self.last_time = None  # the gap before a resume is a restart

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
        last = np.nan if self.last_time is None else self.last_time
        gap = np.empty(n)
        gap[0] = t[0] - last
        np.subtract(t[1:], t[:-1], out=gap[1:])
        valid = np.isfinite(gap) & (gap >= 0)
        names = {ev.name for ev in frame.events}
        if self.finished or not self.fast or not names.isdisjoint(cfg.end_events):
            self._ends(frame, valid)
        elif not names.isdisjoint(_STARTS):
            # no end event, none carried: a (re)start event is a restart, other events and
            # metric records leave the stream running
            rows = frame.rec_is_event.nonzero()[0].tolist()
            for row, ev in zip(rows, frame.events):
                if ev.name in _STARTS:
                    valid[row] = False
                    self.announced = True
        hits: list[Hit] = []
        cand = (valid & (gap > cfg.min_seconds)).nonzero()[0]
        if cand.shape[0]:
            vg = gap[valid]
            vidx = valid.nonzero()[0]
            for i in cand.tolist():
                prev = last if i == 0 else float(t[i - 1])
                before = np.concatenate([self.gaps, vg[vidx < i]])
                lim, med = self._limit(before)
                if gap[i] > lim and self.reported_for != prev:
                    self.reported_for = prev
                    step = int(frame.rec_steps[i - 1]) if i > 0 else self.last_step
                    hits.append(self._hit(int(frame.rec_pos[i]), step, prev, float(gap[i]), lim,
                                          med, ended=True))
        keep = gap if np.count_nonzero(valid) == n else gap[valid]
        w = cfg.gap_window
        self.gaps = keep[-w:] if keep.shape[0] >= w else np.concatenate((self.gaps, keep))[-w:]
        self.last_time = float(t[-1])
        self.last_step = int(frame.rec_steps[-1])
        self.last_pos = int(frame.rec_pos[-1])
        return hits

    def _ends(self, frame: Frame, valid: np.ndarray) -> None:
        """Events that end or restart the stream: a gap after an end event (until the next metric
        record or start event) or before a start event is not a stall. Clears those in
        ``valid``; updates ``finished`` and ``announced``.

        ``finished`` after a record is True after an end event, False after a metric record or a
        (re)start event, unchanged after other events (checkpoint, eval); the gap *into* a record
        is not a stall when ``finished`` held after the record before it. Only events change it
        otherwise than to False, and a frame holds few of them: a walk over the events."""
        cfg: StreamConfig = self.cfg
        n = valid.shape[0]
        fin = self.finished
        prev = -1
        rows = np.flatnonzero(frame.rec_is_event).tolist()
        names = [ev.name for ev in frame.events[:len(rows)]]
        names += [""] * (len(rows) - len(names))  # an event row without its event: another event
        i0 = 0
        if self.fast and not fin:
            # until the first end event only (re)start events act (the walk below would only
            # clear their rows): skip to it
            for name in names:
                if name in cfg.end_events:
                    break
                if name in _STARTS:
                    valid[rows[i0]] = False
                    self.announced = True
                i0 += 1
            if i0:
                prev = rows[i0 - 1]
                rows, names = rows[i0:], names[i0:]
        for row, name in zip(rows, names):
            if row > prev + 1:  # metric records in between: the first one ends a finished run
                if fin:
                    valid[prev + 1] = False
                fin = False
            elif fin:
                valid[row] = False
            if name in cfg.end_events:
                fin = True
            elif name in _STARTS:
                valid[row] = False
                fin = False
                self.announced = True
            prev = row
        if prev + 1 < n:
            if fin:
                valid[prev + 1] = False
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
        lim, med = self._limit(self.gaps)
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
            lim, _med = self._limit(self.gaps)
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
        causes = [(("a hang: a collective waiting on a dead or slow rank (NCCL), or a dead "
                   "data-loader worker"), 0.4),
                  ("the process crashed or was killed (OOM killer, preemption)",
                   0.5 if not ended else 0.1),
                  ("a long pause: a checkpoint to slow storage, a long evaluation", 0.3 if not
                   ended else 0.5)]
        fixes = ["Check the process (ps, nvidia-smi) and the end of console.log",
                 "py-spy dump --pid PID shows where a hung process is stuck",
                 ("Give collectives a timeout (init_process_group(timeout=...)) so a hang "
                 "becomes an error")]
        evidence = {"last_record_time": last_time, "silence_s": round(silence, 3),
                    "limit_s": round(lim, 3),
                    "median_gap_s": round(med, 4) if math.isfinite(med) else None}
        if arrival is not None:  # measured on the watcher's clock, not the writer's
            evidence["last_arrival_time"] = arrival
        return self.alert(pos=pos, severity=cfg.severity, step=step, time=last_time + lim,
                          metric=None, message=message, evidence=evidence, causes=causes,
                          fixes=fixes)
