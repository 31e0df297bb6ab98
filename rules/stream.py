"""``stalled_stream``: no new record for max(min_seconds, gap_factor x the median gap).

Live, :meth:`tick` notices the silence as it happens. In a file read after the fact, a gap
between two records shows a stall that ended (the record after it fires), and :meth:`finish`
reports a file whose last record is old and that has no ``run_end``. A silence is reported once,
however it is noticed. Gaps across a resume (a new segment), after ``run_end`` or before a
``run_start`` are restarts, not stalls.
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
        prev_t = np.empty(n)
        prev_t[0] = np.nan if self.last_time is None else self.last_time
        prev_t[1:] = t[:-1]
        gap = t - prev_t
        valid = np.isfinite(gap) & (gap >= 0)
        if frame.events or self.finished:
            # finished after a record: True after an end event, False after a metric record or a
            # (re)start event, unchanged after other events (checkpoint, eval)
            code = np.where(frame.rec_is_event, -1, 0)
            starts = np.zeros(n, dtype=bool)
            for row, ev in zip(np.flatnonzero(frame.rec_is_event).tolist(), frame.events):
                if ev.name in cfg.end_events:
                    code[row] = 1
                elif ev.name in _STARTS:
                    code[row] = 0
                    starts[row] = True
                    self.announced = True
            idx = np.arange(n)
            last = np.maximum.accumulate(np.where(code >= 0, idx, -1))
            after = np.where(last >= 0, code[np.maximum(last, 0)] == 1, self.finished)
            before = np.empty(n, dtype=bool)
            before[0] = self.finished
            before[1:] = after[:-1]
            valid &= ~before & ~starts
            self.finished = bool(after[-1])
        hits: list[Hit] = []
        cand = np.flatnonzero(valid & (gap > cfg.min_seconds))
        if cand.shape[0]:
            vg = gap[valid]
            vidx = np.flatnonzero(valid)
            for i in cand.tolist():
                before = np.concatenate([self.gaps, vg[vidx < i]])
                lim, med = self._limit(before)
                if gap[i] > lim and self.reported_for != prev_t[i]:
                    self.reported_for = float(prev_t[i])
                    step = int(frame.rec_steps[i - 1]) if i > 0 else self.last_step
                    hits.append(self._hit(int(frame.rec_pos[i]), step, float(prev_t[i]),
                                          float(gap[i]), lim, med, ended=True))
        self.gaps = np.concatenate([self.gaps, gap[valid]])[-cfg.gap_window:]
        self.last_time = float(t[-1])
        self.last_step = int(frame.rec_steps[-1])
        self.last_pos = int(frame.rec_pos[-1])
        return hits

    def _silence(self, now: float, *, at_end: bool) -> list[Hit]:
        if self.last_time is None or self.finished or self.reported_for == self.last_time:
            return []
        lim, med = self._limit(self.gaps)
        silence = now - self.last_time
        if silence <= lim:
            return []
        self.reported_for = self.last_time
        return [self._hit(self.last_pos, self.last_step, self.last_time, silence, lim, med,
                          ended=False, at_end=at_end)]

    def tick(self, now: float) -> list[Hit]:
        if self.watch_start is None:
            self.watch_start = now
        if self.last_time is not None and not self.announced:
            # a log that was already silent when we started watching (yesterday's TensorBoard
            # file) ended before us: the header shows it as idle; only a silence that begins
            # while we watch, or a writer that promised a run_end, is a stall
            lim, _med = self._limit(self.gaps)
            if self.last_time + lim < self.watch_start:
                return []
        return self._silence(now, at_end=False)

    def finish(self, now: float) -> list[Hit]:
        # A missing run_end only means something from a writer that promised one: a TensorBoard
        # or HF file that simply ended long ago is a finished run, not a stalled one.
        if not self.announced:
            return []
        return self._silence(now, at_end=True)

    def _hit(self, pos: int, step: int, last_time: float, silence: float, lim: float, med: float,
             *, ended: bool, at_end: bool = False) -> Hit:
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
        return self.alert(pos=pos, severity=cfg.severity, step=step, time=last_time + lim,
                          metric=None, message=message, evidence=evidence, causes=causes,
                          fixes=fixes)
