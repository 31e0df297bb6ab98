"""Evaluations as the val_loss rules judge them: one by one, or pooled when they are dense.

A val_loss is usually evaluated every few hundred steps, and the rules count evaluations
(``overfit``: worse for 3 of them; ``plateau``: no better for 10). Some scripts log it every step
or few (a running validation metric): then counting evaluations counts steps, and hundreds of
noisy evaluations of a still-falling curve "rise above their best" by chance again and again (68
overfit warnings on a val_loss logged every step of 50k). Dense evaluations are pooled: the
evaluations of each ``window`` steps become their median, judged when the first evaluation of the
next window arrives (so the decision depends only on records at or before the one that makes it,
however the stream is batched).

``overfit`` judges its first ``window`` evaluations one by one all the same (``judged_first``): a
run logged once per epoch (step = epoch, 16 of them) is "dense" in steps, and pooling it would
judge one evaluation in 50 epochs, that is none; a run that evaluates every step pools from its
51st step on. (``plateau`` pools from the start: "not improved in 10 evaluations" of a val_loss
logged every step is 10 steps of a curve still falling slower than its noise.)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from trainwatch.rules.detectors.stats import small_median


@dataclass
class EvalPool:
    """Decides from the first three evaluations whether they are dense (a median gap under
    ``window`` steps), then passes them through or pools them. (A dataclass: rules' state is
    compared field by field in tests.)"""

    window: int
    judged_first: int = 0
    """Evaluations judged one by one before dense ones are pooled."""
    dense: bool | None = None
    """None until three evaluations were seen."""
    _gaps: list[int] = field(default_factory=list)
    _last: int | None = None
    _pool: list[float] = field(default_factory=list)
    _pool_id: int = 0
    _pool_step: int = 0
    _seen: int = 0

    def push(self, value: float, step: int) -> tuple[float, int] | None:
        """The evaluation to judge now, as (value, step of its last evaluation), or None."""
        if self.dense is None:
            if self._last is not None:
                self._gaps.append(step - self._last)
            self._last = step
            if len(self._gaps) >= 2:
                self.dense = small_median(self._gaps) < self.window
        self._seen += 1
        if not self.dense or self._seen <= self.judged_first:
            return value, step
        bucket = step // self.window
        out = None
        if self._pool and bucket != self._pool_id:
            out = small_median(self._pool), self._pool_step
            self._pool = []
        self._pool_id = bucket
        self._pool.append(value)
        self._pool_step = step
        return out

    def judged(self, values: list[float], steps: list[int]) -> Iterator[tuple[int, float, int]]:
        """Each evaluation of a frame to judge now, as (index of the evaluation that makes it,
        value, step)."""
        for i, (value, step) in enumerate(zip(values, steps)):
            out = self.push(value, step)
            if out is not None:
                yield i, out[0], out[1]
