"""``stalled_stream``: no new record for max(min_seconds, gap_factor x the median gap).

The limit is ``max(min_seconds, gap_factor x median)`` of the last ``gap_window`` valid gaps
between records; a gap or a silence longer than it is a stall. In a file read after the fact, a
gap between two records shows a stall that ended (the record after it fires); live, :meth:`tick`
notices the silence as it happens; :meth:`finish` reports a file whose last record is old and
that has no ``run_end``. A silence is reported once, however it is noticed. Gaps across a resume
(a new segment), after an end event or before a ``run_start`` are restarts, not stalls; a gap
that is not finite or negative (a clock stepping back) is no gap.

Live, the silence is measured from when the last record *arrived* (:meth:`arrived`) when the
caller says so: a record's own timestamp comes from the writer's clock, which may be skewed (a
writer on another machine over NFS) or replayed (an old log copied in now), and a stall judged
by it can fire the moment a record arrives. The record timestamps still tell the gaps between
records (the same live and after the fact) and judge a log that was already silent when watching
began, until a record arrives while we watch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainwatch.humanize import fmt_duration
from trainwatch.rules.config.schema import RuleBase, events, integer, num
from trainwatch.rules.detectors.stats import median
from trainwatch.rules.engine.base import Context, Frame, Hit, Rule, rank_causes


@dataclass(frozen=True)
class StreamConfig(RuleBase):
    min_seconds: float = num(gt=0)
    """No silence shorter than this is a stall, however regular the records were."""
    gap_factor: float = num(gt=1)
    """Silence longer than max(min_seconds, gap_factor x median gap) is a stall."""
    gap_window: int = integer(ge=1)
    """Recent gaps the median is taken over."""
    end_events: tuple[str, ...] = events()
    """Events that mean the run finished (no stall after them)."""


STARTS = ("run_start", "resume")
"""Events that (re)start the stream: the gap before them is a restart."""

_CAUSES = {ended: rank_causes([
    ("a hang: a collective waiting on a dead or slow rank (NCCL), or a dead data-loader worker",
     0.4),
    ("the process crashed or was killed (OOM killer, preemption)", 0.1 if ended else 0.5),
    ("a long pause: a checkpoint to slow storage, a long evaluation", 0.5 if ended else 0.3),
]) for ended in (False, True)}
"""The causes, by whether the stream went on after the gap."""
_FIXES = ("Check the process (ps, nvidia-smi) and the end of console.log",
          "py-spy dump --pid PID shows where a hung process is stuck",
          "Give collectives a timeout (init_process_group(timeout=...)) so a hang becomes an error")


def restarts(frame: Frame, end_events: tuple[str, ...], finished: bool
             ) -> tuple[list[int], bool, bool]:
    """The rows of ``frame`` whose gap is a restart, not a stall; whether the stream is finished
    after it; whether it holds a start event.

    ``finished`` after a record is True after an end event, False after a metric record or a
    start event, unchanged after another event (checkpoint, eval). The gap into a record is a
    restart when the stream was finished before it, and the gap into a start event always. Only
    events change ``finished`` otherwise than to False: the walk is over the event rows."""
    n = frame.rec_is_event.shape[0]
    rows = frame.rec_is_event.nonzero()[0].tolist()
    names = [ev.name for ev in frame.events][:len(rows)]
    names += [""] * (len(rows) - len(names))  # an event row without its event: another event
    out: list[int] = []
    started = False
    prev = -1
    for row, name in zip(rows, names):
        if row > prev + 1:  # metric records in between: the first one ends a finished stream
            if finished:
                out.append(prev + 1)
            finished = False
        if finished or name in STARTS:
            out.append(row)
        if name in end_events:
            finished = True
        elif name in STARTS:
            finished, started = False, True
        prev = row
    if prev + 1 < n:
        if finished:
            out.append(prev + 1)
        finished = False
    return out, finished, started


class StalledStreamRule(Rule):
    id = "stalled_stream"

    def __init__(self, cfg: StreamConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.last_time: float | None = None
        """Timestamp of the last record (None: none yet, or a new segment began)."""
        self.last_step = 0
        self.last_pos = 0
        self.gaps = np.empty(0)
        """The last ``gap_window`` valid gaps."""
        self.finished = False
        """The last record was an end event, or an event after one."""
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

    def limit(self, gaps: np.ndarray) -> tuple[float, float]:
        """(the limit a gap must exceed, the median gap) after ``gaps``."""
        cfg: StreamConfig = self.cfg
        med = median(gaps[-cfg.gap_window:]) if gaps.shape[0] else math.nan
        if not math.isfinite(med):
            return cfg.min_seconds, med
        return max(cfg.min_seconds, cfg.gap_factor * med), med

    def update(self, frame: Frame) -> list[Hit]:
        cfg: StreamConfig = self.cfg
        t = frame.rec_times
        if t.shape[0] == 0:
            return []
        last = math.nan if self.last_time is None else self.last_time
        gap = np.empty(t.shape[0])
        gap[0] = t[0] - last
        np.subtract(t[1:], t[:-1], out=gap[1:])
        valid = np.isfinite(gap)
        valid &= gap >= 0
        cleared, self.finished, started = restarts(frame, cfg.end_events, self.finished)
        if cleared:
            valid[cleared] = False
        self.announced = self.announced or started
        ok = gap[valid]
        hits: list[Hit] = []
        w = cfg.gap_window
        over = [i for i in (gap > cfg.min_seconds).nonzero()[0].tolist() if valid[i]]
        n_valid = np.cumsum(valid) if over else valid  # (valid gaps up to each)
        for i in over:
            k = int(n_valid[i]) - 1  # the valid gaps before gap i: the last w count
            lim, med = self.limit(np.concatenate((self.gaps, ok[max(0, k - w):k])))
            prev = last if i == 0 else float(t[i - 1])
            if gap[i] > lim and self.reported_for != prev:
                self.reported_for = prev
                step = int(frame.rec_steps[i - 1]) if i > 0 else self.last_step
                hits.append(self._hit(int(frame.rec_pos[i]), step, prev, float(gap[i]), lim,
                                      med, ended=True))
        self.gaps = np.concatenate((self.gaps, ok))[-w:]
        self.last_time = float(t[-1])
        self.last_step = int(frame.rec_steps[-1])
        self.last_pos = int(frame.rec_pos[-1])
        return hits

    def arrived(self, now: float | None) -> None:
        """The records just fed arrived at ``now`` (None: when is not known)."""
        self.last_arrival = now
        if now is not None and self.watch_start is not None and now >= self.watch_start:
            self.arrived_while_watching = True

    def _silence(self, now: float, *, at_end: bool, since: float | None = None) -> list[Hit]:
        """A silence from ``since`` (the last record's arrival; default its own timestamp)."""
        if self.last_time is None or self.finished or self.reported_for == self.last_time:
            return []
        lim, med = self.limit(self.gaps)
        silence = now - (self.last_time if since is None else since)
        if silence <= lim:
            return []
        self.reported_for = self.last_time
        return [self._hit(self.last_pos, self.last_step, self.last_time, silence, lim, med,
                          ended=False, at_end=at_end, arrival=since)]

    def tick(self, now: float) -> list[Hit]:
        if self.watch_start is None:
            self.watch_start = now
        # a log that was already silent when we started watching (yesterday's TensorBoard file)
        # ended before us: the header shows it as idle; only a silence that begins while we
        # watch, or a writer that promised a run_end, is a stall. Until a record arrives while
        # we watch, only the records' own clock can tell.
        if (self.last_time is not None and not self.announced and not self.arrived_while_watching
                and self.last_time + self.limit(self.gaps)[0] < self.watch_start):
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
        evidence = {"last_record_time": last_time, "silence_s": round(silence, 3),
                    "limit_s": round(lim, 3),
                    "median_gap_s": round(med, 4) if math.isfinite(med) else None}
        if arrival is not None:  # measured on the watcher's clock, not the writer's
            evidence["last_arrival_time"] = arrival
        return self.alert(pos=pos, severity=cfg.severity, step=step, time=last_time + lim,
                          metric=None, message=message, evidence=evidence,
                          causes=_CAUSES[ended], fixes=_FIXES)
