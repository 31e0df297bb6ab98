"""Runs written as JSONL records and checked as ``check`` does: the rule tests' helper for a
series built in the test (a few points of a blow-up, a million-step power law)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from bench.synthetic import parse_chunks
from trainwatch.commands.check import feed_run
from trainwatch.load import LoadedRun
from trainwatch.rules import RuleEngine, load_rules_config
from trainwatch.rules.engine.alert import Alert

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
"""The real-file corpus (tests that read it skip when it is absent)."""


def jsonl(steps: Sequence[int] | np.ndarray, series: Mapping[str, Sequence[float] | np.ndarray],
          every: Mapping[str, int] | None = None) -> bytes:
    """One record per step with each series' value (a series in ``every`` only on steps that
    are multiples of its interval); ``repr`` keeps the values exact (a 4-decimal loss stays
    0.6931)."""
    every = every or {}
    lines = []
    for i, s in enumerate(np.asarray(steps).tolist()):
        rec: dict[str, object] = {"step": s, "time": 1.7e9 + s}
        for name, v in series.items():
            if s % every.get(name, 1) == 0:
                rec[name] = float(v[i])
        lines.append(json.dumps(rec))
    return ("\n".join(lines) + "\n").encode()


def check_jsonl(data: bytes, chunk: int = 4 << 20, cfg: object = None) -> list[Alert]:
    """Every alert of a backfill of the records, as ``trainwatch check`` raises them."""
    now = 2e9
    main = parse_chunks(data, "run/metrics.jsonl", None, now, chunk)
    e = RuleEngine(cfg if cfg is not None else load_rules_config(None), live=False)
    feed_run(e, LoadedRun(Path("run"), "jsonl", main, {}), now=now)
    return list(e.alerts)


def check_file(path: Path) -> list[Alert]:
    """Every alert ``trainwatch check`` raises on a file."""
    from trainwatch.commands.check import run_check
    from trainwatch.load import load_run

    return list(run_check(load_run(path), load_rules_config(None)).alerts)
