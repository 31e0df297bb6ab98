"""The context's step logs (what grad_explosion tells loss_spike and nan_inf) against their plain
reference, a bounded deque of (pos, step) pairs, through long random sequences of additions,
queries and clears: only the last ``maxlen`` points answer."""

from __future__ import annotations

from collections import deque

import numpy as np

from trainwatch.rules.engine.step_log import StepLog


class _Reference:
    """The definition: the last ``maxlen`` (pos, step) pairs, scanned latest first."""

    def __init__(self, maxlen: int) -> None:
        self.items: deque[tuple[int, int]] = deque(maxlen=maxlen)

    def any_between(self, lo: int, hi: int, upto: int) -> int | None:
        for p, s in reversed(self.items):
            if p <= upto and lo <= s <= hi:
                return s
        return None

    def last(self, upto: int) -> int | None:
        for p, s in reversed(self.items):
            if p <= upto:
                return s
        return None


def test_step_log_matches_a_bounded_deque() -> None:
    rng = np.random.default_rng(7)
    for maxlen in (1, 5, 64):
        log, ref = StepLog(maxlen), _Reference(maxlen)
        pos = 0
        for _ in range(3000):
            op = rng.integers(0, 10)
            if op < 3:
                log.add(pos, int(pos // 3))
                ref.items.append((pos, int(pos // 3)))
                pos += 1
            elif op < 5:
                n = int(rng.integers(0, 3 * maxlen + 2))
                p = list(range(pos, pos + n))
                s = [int(v) for v in rng.integers(0, pos + n + 1, n)]
                log.extend(p, s)
                ref.items.extend(zip(p, s))
                pos += n
            elif op == 5 and rng.random() < 0.05:
                log.clear()
                ref.items.clear()
            else:
                upto = int(rng.integers(0, pos + 2))
                lo = int(rng.integers(0, pos + 1))
                hi = lo + int(rng.integers(0, 20))
                assert log.any_between(lo, hi, upto) == ref.any_between(lo, hi, upto)
                assert log.last(upto) == ref.last(upto)


def test_extend_pairs_up_to_the_shorter_sequence() -> None:
    log = StepLog()
    log.extend([1, 2, 3], [10, 20])
    assert log.last(3) == 20 and log.any_between(10, 10, 5) == 10
