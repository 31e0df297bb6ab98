"""console_error tells a Python exception no known error matched: the traceback's last line, with
where it is. A script that dies of one stops logging; without this a person learnt it a minute
later from stalled_stream, and had to find the cause in the log themselves."""

from __future__ import annotations

import pytest

from trainwatch.rules import RuleEngine, load_rules_config

TRACEBACK = """\
step 10 loss 0.5
Traceback (most recent call last):
  File "train.py", line 40, in <module>
    main()
  File "train.py", line 31, in main
    batch = next(it)
KeyError: 'labels'
"""


def _alerts(text: str, reads: int = 1) -> list:
    engine = RuleEngine(load_rules_config(None), live=True)
    lines = text.splitlines()
    size = max(1, -(-len(lines) // reads))
    out = []
    for i in range(0, len(lines), size):
        out += engine.feed_console(lines[i:i + size], i + 1)
    return out


@pytest.mark.parametrize("reads", [1, 3, 7])
def test_an_uncaught_exception_is_told_with_its_lines(reads: int) -> None:
    (a,) = _alerts(TRACEBACK, reads)
    assert (a.rule, a.severity) == ("console_error", "warning")
    assert a.message == ("A Python exception was printed: KeyError: 'labels' (console line 7, "
                         "its traceback from line 2).")
    assert a.evidence["kind"] == "uncaught_exception" and a.evidence["exception"] == "KeyError"
    assert "console line 2" in a.fixes[0]


def test_every_rank_printing_the_same_traceback_is_one_alert() -> None:
    assert len(_alerts(TRACEBACK * 4)) == 1


def test_a_known_error_in_a_traceback_is_told_once_as_itself() -> None:
    text = TRACEBACK.replace("KeyError: 'labels'", "torch.OutOfMemoryError: CUDA out of memory. "
                             "Tried to allocate 2.00 GiB")
    (a,) = _alerts(text)
    assert a.evidence["kind"] == "cuda_oom" and a.severity == "error"
    # the known error on a frame's line, the traceback ending in a generic wrapper: still one
    text = TRACEBACK.replace("    batch = next(it)", "    raise RuntimeError('CUDA out of memory')")
    text = text.replace("KeyError: 'labels'", "RuntimeError: worker failed")
    assert [a.evidence["kind"] for a in _alerts(text)] == ["cuda_oom"]


@pytest.mark.parametrize("after", ["Done", "", "Saving checkpoint to ckpt.pt now"])
def test_a_traceback_not_ended_by_an_exception_line_is_no_alert(after: str) -> None:
    text = "\n".join(TRACEBACK.splitlines()[:6] + [after, "step 11 loss 0.4"]) + "\n"
    assert _alerts(text) == []


def test_log_lines_alone_are_no_alert() -> None:
    assert _alerts("Epoch 3: loss 0.5\nValueError: is only a word here\nDone\n") == []
