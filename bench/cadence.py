"""The labelled synthetic runs (``bench/synthetic.py``) as real loggers write them: a record every
k steps, or one record per epoch, under the metric names of several frameworks.

A run logged every k steps keeps its step numbers (k, 2k, ...) and each record holds the values
of that step (nanoGPT's and Lightning's ``log_every_n_steps``); an evaluation is logged at its own
step. A run logged per epoch (Keras' CSVLogger) has step = epoch (0- or 1-based by seed), the train
loss and the other per-step series averaged over the epoch (memory: its peak; the LR, the probes
and the clock: their value at the epoch's end) and a val loss per epoch (the run's evaluations
interpolated at the epoch's end; none before the first evaluation).

Whether a fault can be seen at a cadence is decided from the logged points, the same way for
every kind: its injected effect (``Label.span`` steps from ``Label.step``, or to the run's end)
must touch a logged point. A sampled point touches it when its step is in the span; an epoch's
mean touches it when it is raised by at least :data:`VISIBLE_RISE` over the same epoch's steps
outside the span (over the previous epoch when the span covers the whole epoch): a one-step 2x
spike averaged over a 40-step epoch is not in the numbers. An effect that starts at the run's
last step (a run that stops logging) is seen at any cadence where the log tells a run that
stopped from one that finished: the trainer's run_start / run_end events (naming 0 at a step
cadence); without them the file looks like any finished run's.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from bench.synthetic import Label, SyntheticRun, base_trace, finish_run

CADENCES = ("1", "10", "50", "epoch")
"""Logging cadences: a record every 1, 10 or 50 steps, or one per epoch."""
EPOCHS = (15, 60)
"""Range of the number of epochs of a per-epoch run (drawn per run)."""
VISIBLE_RISE = 0.2
"""An epoch's mean loss raised this much by a short fault's steps makes the fault visible."""
CONFIRM_POINTS = 5
"""A detection within this many logged points from the fault is in time at any cadence (a rule
needs a few points to confirm; the fault's own window in steps applies when it is longer)."""

NAMINGS: tuple[Mapping[str, str], ...] = (
    {},  # the bundled trainer's names (and its run_start / eval / run_end events)
    {"loss": "train/loss", "val_loss": "eval/loss", "lr": "train/learning_rate",
     "grad_norm": "train/grad_norm", "step_time": "train/step_time",
     "throughput": "train/throughput", "memory": "train/memory"},  # HF Trainer through W&B
    {"loss": "train_loss", "val_loss": "valid_loss", "lr": "lr-AdamW",
     "grad_norm": "grad_2.0_norm_total", "step_time": "iter_time",
     "throughput": "tokens_per_sec", "memory": "max_memory_allocated"},  # Lightning-ish
    {"loss": "Loss/train", "val_loss": "Loss/val", "lr": "learning_rate"},  # a TensorBoard tutorial
)
"""Metric names per naming (absent keys keep the trainer's name), drawn per run."""
EPOCH_AGG = {"memory": "max", "lr": "last", "state_attached": "last", "graph_size": "last",
             "time": "last"}
"""How a per-epoch record sums up a series other than by its mean."""
RANK_KEYS = ("loss", "step_time", "sync_wait", "throughput")


@dataclass(frozen=True)
class Logged:
    """One labelled run as logged at one cadence, and where its fault is in the logged points."""

    run: SyntheticRun
    cadence: str
    naming: int
    data: bytes
    rank_data: Mapping[int, bytes]
    steps: np.ndarray
    """The logged train records' steps (epochs for a per-epoch run), ascending."""
    fault_step: int
    """Where the fault's window opens in the file's steps (epochs for a per-epoch run): the
    last logged point at or before the fault; -1 for a clean run."""
    first_point: int
    """The first logged point that holds the fault (delays count from it)."""
    window_end: int
    """The last step (epoch) at which a detection still counts."""
    visible: bool

    def delay_points(self, alarm_step: int) -> int:
        """Logged points from the fault to the alarm: 0 on the first one at or after it."""
        first = int(np.searchsorted(self.steps, self.first_point, side="left"))
        last = int(np.searchsorted(self.steps, alarm_step, side="right"))
        return max(0, last - first - 1)


def _pick(seed: int, what: str, n: int) -> int:
    """A deterministic draw of ``range(n)``, apart from the sizes the injectors cycle by seed."""
    return zlib.crc32(f"{what}/{seed}".encode()) % n


def windows(run: SyntheticRun, cadence: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(record steps, first row, end row) of each logged record: one row per record every k
    steps, a block of rows per epoch."""
    steps = np.asarray(run.train["step"])
    n = steps.shape[0]
    if cadence != "epoch":
        rows = np.flatnonzero(steps % int(cadence) == 0)
        return steps[rows], rows, rows + 1
    lo, hi = EPOCHS
    n_epochs = min(n, lo + _pick(run.seed, f"epochs/{run.name}", hi - lo + 1))
    size = n // n_epochs
    starts = np.arange(n_epochs) * size
    ends = np.append(starts[1:], n)  # the remainder goes to the last epoch
    base = _pick(run.seed, f"base/{run.name}", 2)  # Keras counts epochs from 0
    return np.arange(n_epochs) + base, starts, ends


def _val_at(ends: np.ndarray, steps: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """The val loss at each epoch's end: the finite evaluations interpolated, and from the first
    non-finite evaluation on, that value (interpolating towards a NaN would put it in epochs that
    ended before it)."""
    out = np.full(ends.shape, np.nan)
    finite = np.isfinite(vals)
    if finite.any():
        out = np.interp(ends, steps[finite], vals[finite])
    if not finite.all():
        first_bad = int(np.argmin(finite))
        out = np.where(ends >= steps[first_bad], vals[first_bad], out)
    return out


def _reduce(col: np.ndarray, starts: np.ndarray, ends: np.ndarray, how: str) -> np.ndarray:
    col = np.asarray(col, dtype=np.float64)
    if how == "last":
        return col[ends - 1]
    if how == "max":
        return np.maximum.reduceat(col, starts)
    return np.add.reduceat(col, starts) / (ends - starts)


def visible(label: Label, loss: np.ndarray, row_steps: np.ndarray, starts: np.ndarray,
            ends: np.ndarray, averaged: bool, events: bool) -> bool:
    """Whether the fault's effect touches a logged point (the module docstring's rule)."""
    if label.rule is None:
        return True
    at = label.step
    if label.span is None and at >= int(row_steps[-1]):
        return events  # the run's end itself: told from a finished run by the events alone
    stop = math.inf if label.span is None else at + label.span
    for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
        seg = row_steps[a:b]
        hit = (seg >= at) & (seg < stop)
        if not hit.any():
            continue
        if not averaged or label.span is None:
            return True
        inside = loss[a:b]
        rest = inside[~hit] if (~hit).any() else (loss[starts[i - 1]:ends[i - 1]] if i else None)
        if rest is None or rest.size == 0:
            return True
        base = float(np.mean(rest))
        mean = float(np.mean(inside))
        if not math.isfinite(mean) or mean >= base * (1 + VISIBLE_RISE):
            return True
    return False


def log_run(run: SyntheticRun, cadence: str, naming: int | None = None) -> Logged:
    """``run`` as logged at ``cadence`` under ``naming`` (an index of :data:`NAMINGS`; default:
    drawn from the run's seed and name)."""
    if naming is None:
        naming = _pick(run.seed, f"naming/{run.name}/{cadence}", len(NAMINGS))
    names = NAMINGS[naming]
    rec_steps, starts, ends = windows(run, cadence)
    averaged = cadence == "epoch"
    tr = run.train
    row_steps = np.asarray(tr["step"])
    cols: dict[str, np.ndarray] = {}
    for key, col in tr.items():
        if key in ("step", "epoch"):
            continue
        cols[names.get(key, key)] = (
            _reduce(col, starts, ends, EPOCH_AGG.get(key, "mean")) if averaged
            else np.asarray(col, dtype=np.float64)[starts])
    sparse = {names.get(k, k): e for k, e in run.every.items()} if cadence == "1" else {}
    if not averaged:
        cols["epoch"] = np.asarray(tr["epoch"])[starts]
    val_steps = np.asarray(run.val["step"])
    val_vals = np.asarray(run.val["val_loss"], dtype=np.float64)
    if averaged:
        end_steps = row_steps[ends - 1]
        first_eval = val_steps[0] if val_steps.size else math.inf
        has_val = end_steps >= first_eval
        val = _val_at(end_steps, val_steps, val_vals)
        cols["epoch"] = rec_steps.astype(np.float64)
        eval_seconds: np.ndarray | None = None
    else:
        pos = {int(s): i for i, s in enumerate(val_steps.tolist())}
        idx = [pos.get(int(s), -1) for s in rec_steps.tolist()]
        has_val = np.array([i >= 0 for i in idx], dtype=bool)
        val = np.array([val_vals[i] if i >= 0 else np.nan for i in idx])
        val_s = np.asarray(run.val["seconds"], dtype=np.float64)
        eval_seconds = np.array([val_s[i] if i >= 0 else np.nan for i in idx])
    # the trainer's events (an evaluation's duration, the run's start and end) with its names;
    # a per-epoch log (Keras) has none
    events = naming == 0 and not averaged
    data = _jsonl(rec_steps, cols, sparse, names.get("val_loss", "val_loss"), val, has_val,
                  eval_seconds if events else None, run.ended)
    rank_data = {}
    for r, rc in run.ranks.items():
        rcols = {k: (_reduce(rc[k], starts, ends, "mean") if averaged
                     else np.asarray(rc[k], dtype=np.float64)[starts]) for k in RANK_KEYS}
        rcols["time"] = (np.asarray(rc["time"])[ends - 1] if averaged
                         else np.asarray(rc["time"])[starts])
        rank_data[r] = _jsonl(rec_steps, rcols, {}, "", np.array([]), np.zeros(len(rec_steps),
                              dtype=bool), None, False)
    opened, first, end = _fault_window(run.label, rec_steps, row_steps, starts, ends, averaged)
    loss = np.asarray(tr["loss"], dtype=np.float64)
    return Logged(run, cadence, naming, data, rank_data, rec_steps, opened, first, end,
                  visible(run.label, loss, row_steps, starts, ends, averaged, events))


def _fault_window(label: Label, rec_steps: np.ndarray, row_steps: np.ndarray,
                  starts: np.ndarray, ends: np.ndarray, averaged: bool
                  ) -> tuple[int, int, int]:
    """(window start, first point holding the fault, window end) in the file's steps. The window opens at the last logged point
    at or before the fault's step (a pause after a step that is not logged is told after the
    logged step before it; an epoch's record comes after its steps) and lasts the fault's own
    ``delta_max`` or :data:`CONFIRM_POINTS` logged points, whichever is longer."""
    if label.rule is None:
        return -1, -1, -1
    if averaged:
        def epoch_of(step: int) -> int:
            row = int(np.searchsorted(row_steps, step, side="left"))
            i = int(np.searchsorted(ends, min(row, int(ends[-1]) - 1), side="right"))
            return int(rec_steps[min(i, len(rec_steps) - 1)])
        fault = epoch_of(label.step)
        end = epoch_of(label.step + label.delta_max)
    else:
        fault, end = label.step, label.step + label.delta_max
    first = int(np.searchsorted(rec_steps, fault, side="left"))
    nth = rec_steps[min(first + CONFIRM_POINTS - 1, len(rec_steps) - 1)] if len(rec_steps) else fault
    if averaged:
        opened = int(rec_steps[max(first - 1, 0)])
    else:
        opened = int(rec_steps[max(int(np.searchsorted(rec_steps, fault, side="right")) - 1, 0)])
    holds = int(rec_steps[min(first, len(rec_steps) - 1)])
    return opened, holds, max(end, int(nth))


def _num(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return f"{x:.7g}"


def _jsonl(steps: np.ndarray, cols: Mapping[str, np.ndarray], sparse: Mapping[str, int],
           val_name: str, val: np.ndarray, has_val: np.ndarray,
           eval_seconds: np.ndarray | None, ended: bool) -> bytes:
    """One JSON object per record: ``step``, ``time``, the columns, the val loss where there is
    one; the trainer's events around them when ``eval_seconds`` (each evaluation's duration)
    is given."""
    events = eval_seconds is not None
    times = cols["time"]
    keys = [k for k in cols if k != "time"]
    text = {k: [_num(v) for v in cols[k].tolist()] for k in keys}
    out = []
    if events and len(steps):
        out.append(f'{{"event":"run_start","time":{float(times[0]) - 1.0:.3f},"config":{{}}}}')
    for i, s in enumerate(steps.tolist()):
        fields = ",".join(f'"{k}":{text[k][i]}' for k in keys
                          if k not in sparse or s % sparse[k] == 0)
        if has_val[i]:
            v = _num(float(val[i]))
            if eval_seconds is not None:
                out.append(f'{{"event":"eval","step":{s},"time":{float(times[i]) - 0.001:.3f},'
                           f'"{val_name}":{v},"seconds":{float(eval_seconds[i]):.4f}}}')
            fields += f',"{val_name}":{v}'
        out.append(f'{{"step":{s},"time":{float(times[i]):.3f},{fields}}}')
    if events and ended and len(steps):
        out.append(f'{{"event":"run_end","time":{float(times[-1]) + 1.0:.3f},'
                   '"status":"finished","exit_code":0}')
    return ("\n".join(out) + "\n").encode()


# ------------------------------------------------------------------------ long pre-training run

PRETRAIN_EVAL_EVERY = 1000


def pretrain_run(seed: int, n_steps: int = 1_000_000) -> SyntheticRun:
    """A clean run shaped like pre-training: a power law in the steps taken at the LR
    (``L_inf + A (1 + progress / s0) ** -alpha``, alpha 0.15-0.35), still improving ever more
    slowly at the end; warm-up and cosine to 10 % of the peak LR; 2 % batch noise; an evaluation
    every 1,000 steps. The other series are those of a clean run (``base_trace``)."""
    rng = np.random.default_rng([seed, zlib.crc32(b"pretrain")])
    tr = base_trace(rng, n_steps, "cosine", 0.02)
    progress = np.cumsum(tr.lr) / tr.lr_peak
    l0, linf = rng.uniform(9.0, 11.0), rng.uniform(1.5, 2.8)
    s0, alpha = rng.uniform(200.0, 2000.0), rng.uniform(0.15, 0.35)
    tr.mean = linf + (l0 - linf) * (1 + progress / s0) ** -alpha
    tr.val_mean = tr.mean * rng.uniform(1.0, 1.03)
    tr.eval_every = PRETRAIN_EVAL_EVERY
    is_eval = tr.steps % PRETRAIN_EVAL_EVERY == 0
    tr.eval_s = np.where(is_eval, rng.uniform(20.0, 60.0, n_steps), 0.0)
    label = Label("clean", None, -1, 0, {"alpha": alpha, "s0": s0})
    return finish_run(tr, f"pretrain-{seed}", seed, "pretrain", label)
