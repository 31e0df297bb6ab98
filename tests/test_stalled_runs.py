"""``learning_stalled`` against its definition, a loss value at a time (:class:`StalledReference`),
compared after every frame, whatever the frames and bars."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from rule_frames import frames_of

from trainwatch.rules.builtin.learning_stalled import LearningStalledRule, StalledConfig
from trainwatch.rules.config.loading import load_rules_config
from trainwatch.rules.engine.base import Context, Frame


class StalledReference:
    """The rule's definition on one finite loss value at a time: the run of equal values ending
    at each point; a non-zero run fires at its ``constant_points``-th value; a run of zeros at
    its ``zero_points``-th when the non-zero values in a row before it are at least
    ``mixed_points`` (or there were no zeros before), and at its ``max(zero_points,
    mixed_points)``-th always, while armed: a zero alert disarms, ``rearm_points`` non-zero
    values in a row re-arm."""

    def __init__(self, cfg: StalledConfig) -> None:
        self.cfg = cfg
        self.prev: float | None = None
        self.run = 0
        self.since = 0
        self.armed = True
        self.nonzero = 1 << 40  # (no zero yet)
        self.gap = 1 << 40  # non-zero values in a row before the current run of zeros

    def feed(self, frame: Frame) -> list[tuple[int, int, int, bool]]:
        """(record, run length, first step of the run, zero) of each alert."""
        cfg = self.cfg
        long = max(cfg.zero_points, cfg.mixed_points)
        out = []
        pts = frame.series["loss"]
        for pos, step, v in zip(pts.pos.tolist(), pts.steps.tolist(), pts.values.tolist()):
            if not np.isfinite(v):
                continue
            if v == self.prev:
                self.run += 1
            else:
                self.run, self.since = 1, step
                if v == 0.0:
                    self.gap = self.nonzero
            self.prev = v
            if v != 0.0:
                self.nonzero += 1
                if self.nonzero >= cfg.rearm_points:
                    self.armed = True
                if self.run == cfg.constant_points:
                    out.append((pos, self.run, self.since, False))
                continue
            self.nonzero = 0
            if (self.armed and self.run in (cfg.zero_points, long)
                    and (self.run >= long or self.gap >= cfg.mixed_points)):
                out.append((pos, self.run, self.since, True))
                self.armed = False
        return out


def _fired(rule: LearningStalledRule, frame: Frame) -> list[tuple[int, int, int, bool]]:
    rule.ctx.frame = frame
    hits = rule.update(frame)
    rule.ctx.end_frame(frame)
    return [(h.pos, h.alert.evidence["points"], h.alert.evidence["since_step"],
             "exactly 0 " in h.alert.message) for h in hits]


def check_against_reference(cfg: StalledConfig, loss: np.ndarray, cuts: list[int]
                            ) -> list[tuple[int, int, int, bool]]:
    """Feed ``loss`` cut at ``cuts`` to the rule and the reference: the same alerts after every
    frame. Returns them."""
    rule, ref = LearningStalledRule(cfg, Context()), StalledReference(cfg)
    fired = []
    for frame in frames_of({"loss": loss}, cuts):
        got = _fired(rule, frame)
        assert got == ref.feed(frame)
        fired += got
    return fired


def _loss(rng: np.random.Generator, n: int) -> np.ndarray:
    """A noisy loss with stretches frozen at one value, at exactly 0 (or -0.0), lone repeats,
    negative values and NaNs."""
    out: list[np.ndarray] = []
    while sum(len(p) for p in out) < n:
        k = int(rng.integers(1, 80))
        kind = rng.integers(0, 6)
        if kind == 0:
            out.append(np.full(k, round(float(rng.uniform(0.5, 2)), 2)))
        elif kind == 1:
            out.append(np.zeros(k) * rng.choice([1.0, -1.0]))
        elif kind == 2:
            out.append(np.repeat(rng.uniform(-1, 1, -(-k // 2)), 2)[:k])
        elif kind == 3:
            out.append(np.full(k, np.nan))
        else:
            out.append(rng.uniform(0.1, 3, k))
    return np.concatenate(out)[:n]


@pytest.mark.parametrize("seed", range(5))
def test_the_rule_follows_its_definition_point_by_point(seed: int) -> None:
    base = load_rules_config().rules["learning_stalled"]
    rng = np.random.default_rng(seed)
    fired = {True: 0, False: 0}
    for _ in range(60):
        cfg = dataclasses.replace(base, zero_points=int(rng.choice([1, 3, 10])),
                                  constant_points=int(rng.choice([2, 5, 50])),
                                  rearm_points=int(rng.choice([1, 5, 50])),
                                  mixed_points=int(rng.choice([0, 0, 5, 30])))
        n = int(rng.integers(1, 1500))
        loss = _loss(rng, n)
        k = int(rng.integers(0, 8))
        cuts = sorted({0, n, *rng.integers(1, max(n, 2), k).tolist()})
        if rng.random() < 0.2:  # live-sized frames
            cuts = [*range(0, n, int(rng.integers(1, 10))), n]
        for hit in check_against_reference(cfg, loss, [c for c in cuts if c <= n]):
            fired[hit[3]] += 1
    assert min(fired.values()) > 20, fired
