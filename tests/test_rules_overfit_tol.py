"""``overfit``'s train tolerance (how far the train loss may rise and still count as not rising)
after any frame: 3 standard errors of the difference of two block medians (from the noise of the
last block of the last frame that completed one), or ``train_min_delta`` when more."""

from __future__ import annotations

import numpy as np

from trainwatch.rules import load_rules_config
from trainwatch.rules.builtin.overfit import OverfitRule
from trainwatch.rules.detectors.blocks import BlockStream
from trainwatch.rules.engine.base import Context, Frame, Points


def _frame(loss: np.ndarray, start: int) -> Frame:
    n = loss.shape[0]
    idx = np.arange(start, start + n)
    pts = Points("loss", idx, loss, idx.astype(np.float64), idx)
    return Frame(0, {"loss": "loss"}, {"loss": pts}, (), pts.steps, pts.times, pts.pos,
                 np.zeros(n, dtype=bool))


def test_the_train_tolerance_read_at_any_frame_is_the_last_blocks() -> None:
    cfg = load_rules_config().rules["overfit"]
    for seed in range(4):
        rng = np.random.default_rng(seed)
        v = np.exp(-np.arange(8000) / 3000.0) * (1.0 + 0.04 * rng.standard_normal(8000))
        rule = OverfitRule(cfg, Context())
        ref = BlockStream(cfg.train_window)
        want = cfg.train_min_delta
        pos = reads = 0
        while pos < v.shape[0]:
            c = int(rng.integers(1, 400))
            part = v[pos:pos + c]
            b = ref.push(Points("loss", np.arange(pos, pos + part.shape[0]), part,
                                np.zeros(part.shape[0]), np.arange(pos, pos + part.shape[0])))
            if len(b):
                want = max(cfg.train_min_delta, 3.0 * 1.4142 * float(b.noise[-1]))
            rule.update(_frame(part, pos))
            pos += c
            if rng.random() < 0.3:
                assert rule.train_tol == want, (seed, pos)
                reads += 1
        assert reads > 5 and want > cfg.train_min_delta

