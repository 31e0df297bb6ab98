"""Episodes: a run of anomalous points decided at once (``Episode.run_list`` on a Python list,
``Episode.run`` on arrays) decides as its points given to ``Episode.hit`` one by one."""

from __future__ import annotations

import copy

import numpy as np

from trainwatch.rules.detectors.episode import Episode

RNG = np.random.default_rng(20261122)


def _point_by_point(ep: Episode, steps: np.ndarray, severe: np.ndarray) -> list[tuple[int, str]]:
    """The definition: each point of the run given to hit() in turn."""
    out = []
    for i, (s, sv) in enumerate(zip(steps.tolist(), severe.tolist())):
        kind = ep.hit(s, sv)
        if kind is not None:
            out.append((i, kind))
    return out


def test_episode_runs_decide_as_their_points_one_by_one() -> None:
    """From every state an episode can be in, runs of 1 to 60 points (the cooldown scanned point
    by point up to 16, as an array beyond), with and without severe points, as a list
    (run_list) and as arrays (run)."""
    seen = set()
    for trial in range(4000):
        kw = {"rearm": int(RNG.integers(1, 4)), "cooldown": int(RNG.integers(0, 30)),
              "persist": int(RNG.integers(0, 12))}
        ep = Episode(**kw, active=bool(RNG.integers(0, 2)), count=int(RNG.integers(0, 12)),
                     quiet=int(RNG.integers(0, 3)), escalated=bool(RNG.integers(0, 2)),
                     last_start=None if RNG.random() < 0.2 else int(RNG.integers(0, 20)))
        n = int(RNG.integers(1, 61))
        steps = np.sort(RNG.choice(np.arange(90), n, replace=False)).astype(np.int64)
        severe = RNG.random(n) < RNG.choice([0.0, 0.05, 0.3])
        listed, arrays, ref = copy.copy(ep), copy.copy(ep), copy.copy(ep)
        want = _point_by_point(ref, steps, severe)
        assert (listed.run_list(steps, severe.tolist()), listed) == (want, ref), (trial, ep)
        assert (arrays.run(steps, severe), arrays) == (want, ref), (trial, ep)
        assert type(listed.last_start) in (int, type(None))
        seen.update(kind for _, kind in want)
        seen.add("none" if not want else "some")
    assert seen == {"start", "escalate", "start_escalated", "none", "some"}
