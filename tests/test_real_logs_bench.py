"""``bench/real_logs.py`` scores ``trainwatch check`` against a corpus's EXPECTED.tsv.

A tiny corpus is written here (a run whose loss turns NaN, a clean one) with tables that are
right and tables that are wrong about them, so the scorer can be seen to fail; the script runs
the real ``check`` as a subprocess on each file.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.real_logs import Expected, Got, main, score

HEADER = "file\tverdict\trules\twhat a person sees in the numbers\n"


def _write_run(path: Path, nan_from: int | None) -> None:
    lines = []
    for s in range(1, 201):
        loss = 3.0 * math.exp(-s / 80) + 0.5 + 0.01 * math.sin(s * 1.7)
        if nan_from is not None and s >= nan_from:
            loss = math.nan
        lines.append(json.dumps({"step": s, "loss": loss}))
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    _write_run(tmp_path / "nan.jsonl", nan_from=150)
    _write_run(tmp_path / "clean.jsonl", nan_from=None)
    return tmp_path


def _run(corpus: Path, table: str, tmp_path: Path) -> dict:
    (corpus / "EXPECTED.tsv").write_text(HEADER + table)
    out = tmp_path / "out.json"
    assert main(["--corpus", str(corpus), "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_right_table_scores_every_verdict_right(corpus: Path, tmp_path: Path) -> None:
    doc = _run(corpus, "nan.jsonl\tfault\tdivergence|nan_inf\tNaN from step 150\n"
                       "clean.jsonl\thealthy\t\ta falling loss\n", tmp_path)
    by_file = {f["file"]: f for f in doc["files"]}
    assert by_file["nan.jsonl"]["outcome"] == "HIT"
    assert "nan_inf/error@150" in by_file["nan.jsonl"]["alerts"]
    assert by_file["clean.jsonl"]["outcome"] == "OK"
    t = doc["totals"]
    assert (t["faults_caught"], t["healthy_false_alarms"], t["verdicts_right"]) == (1, 0, 2)


def test_wrong_table_scores_misses_false_alarms_and_wrong_errors(
        corpus: Path, tmp_path: Path) -> None:
    doc = _run(corpus, "nan.jsonl\tfault\toverfit\tsaid to overfit\n"
                       "clean.jsonl\tfault\tdivergence\tsaid to diverge\n", tmp_path)
    by_file = {f["file"]: f for f in doc["files"]}
    assert by_file["nan.jsonl"]["outcome"] == "MISS"
    assert by_file["nan.jsonl"]["wrong"] == ["nan_inf/error@150"]
    assert by_file["clean.jsonl"]["outcome"] == "MISS"
    t = doc["totals"]
    assert (t["faults_caught"], t["wrong_errors"], t["verdicts_right"]) == (0, 1, 0)

    doc = _run(corpus, "nan.jsonl\thealthy\t\tsaid to be clean\n", tmp_path)
    assert doc["files"][0]["outcome"] == "FALSE-ALARM"
    assert doc["totals"]["healthy_false_alarms"] == 1


def test_missing_file_fails_and_missing_corpus_exits_2(corpus: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    doc = _run(corpus, "gone.jsonl\tfault\tnan_inf\tnot there\n", tmp_path)
    assert doc["files"][0]["outcome"] == "FAILED" and doc["totals"]["failed"] == 1
    assert main(["--corpus", str(tmp_path / "absent")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "absent" in err[0]


def test_score_severities_and_the_notes_tolerance() -> None:
    healthy = Expected("a", "healthy", (), "a clean run")
    fair = Expected("b", "healthy", (), "two real spikes: warnings are fair, an error is not")
    warn = [Got("loss_spike", "warning", 10)]
    info = [Got("plateau", "info", 10)]
    err = [Got("divergence", "error", 10)]
    assert score(healthy, info).outcome == "OK"
    assert score(healthy, warn).outcome == "FALSE-ALARM"
    assert score(fair, warn).outcome == "OK"
    assert score(fair, err).outcome == "FALSE-ALARM" and not score(fair, err).right
    fault = Expected("c", "fault", ("loss_spike",), "spikes; a divergence error is not right")
    assert score(fault, info + [Got("loss_spike", "info", 3)]).outcome == "MISS"
    mixed = score(fault, warn + err)
    assert mixed.outcome == "HIT" and mixed.wrong == ["divergence/error@10"] and not mixed.right
    assert score(fault, warn + [Got("plateau", "warning", 20)]).right
