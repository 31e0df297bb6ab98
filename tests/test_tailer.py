"""The tailer: every record exactly once, whatever the writer, the file system or the events do.

Pure FileTailer tests drive reads by hand (deterministic). Follower tests run the real thread
and wait on conditions with deadlines, never fixed sleeps.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from watchdog.observers import Observer

import trainwatch.tailer as tailer_mod
from trainwatch.batch import RecordBatch, empty_batch
from trainwatch.formats.jsonl import JsonlParser
from trainwatch.tailer import FileTailer, Follower, TailStatus, TextChunk, terminal_text
from trainwatch.watch import DirWatcher


def jsonl(path: Path) -> JsonlParser:
    return JsonlParser(str(path))


def rec(step: int, **kw: float) -> bytes:
    return (json.dumps({"step": step, "loss": 1.0 / (step + 1), **kw}) + "\n").encode()


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def batches(items: list) -> list[RecordBatch]:
    return [i for i in items if isinstance(i, RecordBatch)]


def steps_of(items: list) -> list[int]:
    return [s for b in batches(items) for s in b.steps.tolist()]


def statuses(items: list) -> list[TailStatus]:
    return [i for i in items if isinstance(i, TailStatus)]


def drain(t: FileTailer) -> list:
    """Read until caught up, as the follower does."""
    out = t.read()
    while t.has_more:
        out += t.read()
    return out


def wait_until(cond: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)  # polling a condition, bounded by the deadline


class Sink:
    """Thread-safe collector for the follower's callbacks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[tuple[str, RecordBatch]] = []
        self.text: list[tuple[str, list[str], int]] = []
        self.status: list[TailStatus] = []

    def on_batch(self, path: str, b: RecordBatch) -> None:
        with self.lock:
            self.batches.append((path, b))

    def on_text(self, path: str, lines: list[str], first: int) -> None:
        with self.lock:
            self.text.append((path, lines, first))

    def on_status(self, s: TailStatus) -> None:
        with self.lock:
            self.status.append(s)

    def steps(self, path: str | None = None) -> list[int]:
        with self.lock:
            return [s for p, b in self.batches if path in (None, p) for s in b.steps.tolist()]

    def states(self, path: str) -> list[str]:
        with self.lock:
            return [s.state for s in self.status if s.path == path]

    def follower(self, **kw) -> Follower:
        return Follower(on_batch=self.on_batch, on_text=self.on_text, on_status=self.on_status, **kw)


# ---------------------------------------------------------------------- partial lines
def test_partial_line_is_held_until_completed(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_bytes(rec(0) + rec(1)[:9])
    t = FileTailer(p, jsonl)
    assert steps_of(drain(t)) == [0]
    assert steps_of(drain(t)) == []  # nothing new: the half line is not parsed
    append(p, rec(1)[9:] + b'{"event": "eval", "step": 2}\n')
    items = drain(t)
    assert steps_of(items) == [1, 2]
    (ev,) = [e for b in batches(items) for e in b.events]
    assert ev.line == 3  # line numbers continue across reads
    assert not any(b.malformed for b in batches(items))


def test_last_line_without_newline_only_parsed_when_final(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_bytes(rec(0) + rec(1).rstrip(b"\n") + b"\n" + b'{"step": 2, "loss": 0.1}')
    t = FileTailer(p, jsonl)
    assert steps_of(drain(t)) == [0, 1]
    assert t.flush(final=False) == []
    assert steps_of(t.flush(final=True)) == [2]
    # a torn last line (crash mid-write) is reported with its line number, not silently lost
    q = tmp_path / "torn.jsonl"
    q.write_bytes(rec(0) + b'{"step": 1, "lo')
    t = FileTailer(q, jsonl)
    drain(t)
    (b,) = batches(t.flush(final=True))
    assert b.n_records == 0 and b.malformed[0].line == 2


def _split_content() -> bytes:
    lines = [rec(i) for i in range(5)]
    lines.insert(2, b"not json\n")
    lines.insert(4, b'{"event": "checkpoint", "step": 3, "path": "caf\xc3\xa9.pt"}\r\n')
    return b"".join(lines)


def _reference(content: bytes) -> tuple[list[int], list[int], list[int]]:
    t = FileTailer(Path("/nonexistent"), jsonl)
    items = [t.reader.parse(content, 1)]  # type: ignore[union-attr]
    return (
        steps_of(items),
        [m.line for b in batches(items) for m in b.malformed],
        [e.line for b in batches(items) for e in b.events],
    )


def _summary(items: list) -> tuple[list[int], list[int], list[int]]:
    bs = batches(items)
    return (
        steps_of(items),
        [m.line for b in bs for m in b.malformed],
        [e.line for b in bs for e in b.events],
    )


def test_every_split_position_of_a_write(tmp_path: Path) -> None:
    content = _split_content()
    expected = _reference(content)
    assert expected[1] == [3] and expected[2] == [5]
    for k in range(len(content) + 1):
        p = tmp_path / f"m{k}.jsonl"
        p.write_bytes(content[:k])
        t = FileTailer(p, jsonl)
        items = drain(t)
        append(p, content[k:])
        items += drain(t)
        assert _summary(items) == expected, f"split at byte {k}"


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 16, 61])
def test_every_chunk_boundary(tmp_path: Path, chunk: int) -> None:
    content = _split_content()
    p = tmp_path / "m.jsonl"
    p.write_bytes(content)
    t = FileTailer(p, jsonl, chunk_bytes=chunk)
    items = drain(t)
    assert _summary(items) == _reference(content)
    assert t.progress.bytes_read == t.progress.size == len(content)


def test_text_every_split_position(tmp_path: Path) -> None:
    content = b"loss 1\nepoch 1:  10%|#   \repoch 1: 100%|####\r\nbad \xff byte\n\ncaf\xc3\xa9\n"
    expected = ["loss 1", "epoch 1: 100%|####", "bad \ufffd byte", "", "café"]
    for k in range(len(content) + 1):
        p = tmp_path / f"c{k}.log"
        p.write_bytes(content[:k])
        t = FileTailer(p, text=True)
        items = drain(t)
        append(p, content[k:])
        items += drain(t)
        chunks = [i for i in items if isinstance(i, TextChunk)]
        got = [ln for c in chunks for ln in c.lines]
        assert got == expected, f"split at byte {k}"
        n = 1
        for c in chunks:  # first_line of each chunk continues the numbering
            assert c.first_line == n
            n += len(c.lines)


# ---------------------------------------------------------------------- text mode
def test_text_lines_with_carriage_return_progress(tmp_path: Path) -> None:
    p = tmp_path / "console.log"
    bar = "".join(f"\r{i:3d}%|{'#' * (i // 10):10s}|" for i in range(0, 101, 5))
    p.write_bytes(f"start\n{bar}\nnext\r\n".encode())
    sink = Sink()
    f = sink.follower(poll_interval=0.02)
    f.follow_text(p)
    assert f.read_once() >= 1
    assert sink.text == [(str(p), ["start", "100%|##########|", "next"], 1)]
    assert terminal_text(b"abc\r\r\n") == "abc"
    # an hour of a bar without a newline keeps only the current text in memory
    t = FileTailer(p, text=True)
    drain(t)
    append(p, "".join(f"\r{i:6d} it" for i in range(50_000)).encode())
    drain(t)
    assert len(t._partial) < 64
    append(p, b"\n")
    (c,) = [i for i in drain(t) if isinstance(i, TextChunk)]
    assert c.lines == (" 49999 it",) and c.first_line == 4


# ---------------------------------------------------------------------- truncation, rotation
def test_truncation_restarts_from_top(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_bytes(rec(0) + rec(1) + rec(2))
    t = FileTailer(p, jsonl)
    assert steps_of(drain(t)) == [0, 1, 2]
    with open(p, "r+b") as f:  # truncate in place: same inode
        f.truncate(0)
    items = drain(t)
    assert [s.state for s in statuses(items)] == ["reset"]
    (b,) = batches(items)  # the reset is handed on even before any new record
    assert b.reset and b.n_records == 0
    append(p, rec(10))
    items = drain(t)
    assert steps_of(items) == [10] and not any(b.reset for b in batches(items))


def test_truncate_and_regrow_past_offset_between_polls(tmp_path: Path) -> None:
    """Same inode, new content longer than the old offset: caught by the head fingerprint."""
    p = tmp_path / "m.jsonl"
    p.write_bytes(rec(0) + rec(1))
    t = FileTailer(p, jsonl)
    drain(t)
    ino = p.stat().st_ino
    with open(p, "r+b") as f:
        f.truncate(0)
        f.write(b"".join(rec(s, lr=0.5) for s in range(100, 110)))
    assert p.stat().st_ino == ino
    items = drain(t)
    assert steps_of(items) == list(range(100, 110))
    assert batches(items)[0].reset
    assert [s.state for s in statuses(items)] == ["reset"]


def test_rewrite_with_same_tail_detected_by_head(tmp_path: Path) -> None:
    """Same bytes just before the old offset, different first line: still a reset."""
    common = b'{"event": "note", "step": 9, "text": "' + b"x" * 80 + b'"}\n'
    p = tmp_path / "m.jsonl"
    p.write_bytes(b'{"step": 1}\n' + common)
    t = FileTailer(p, jsonl)
    assert steps_of(drain(t)) == [1, 9]
    with open(p, "r+b") as f:
        f.write(b'{"step": 2}\n' + common + b'{"step": 3}\n')
    items = drain(t)
    assert steps_of(items) == [2, 9, 3] and batches(items)[0].reset


def test_rewrite_with_same_head_detected_by_mark(tmp_path: Path) -> None:
    """Same first bytes, different bytes just before the old offset: still a reset."""
    head = b'{"event": "run_start", "step": 0}\n'
    p = tmp_path / "m.jsonl"
    p.write_bytes(head * 40 + rec(1))  # head fingerprint covers only the first KiB
    t = FileTailer(p, jsonl)
    drain(t)
    with open(p, "r+b") as f:
        f.truncate(0)
        f.write(head * 40 + rec(7) + rec(8) + rec(9))
    items = drain(t)
    assert batches(items)[0].reset and steps_of(items)[-3:] == [7, 8, 9]


def test_same_size_rewrite_is_detected(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_bytes(rec(1, lr=0.5) + rec(3, lr=0.5))
    t = FileTailer(p, jsonl)
    drain(t)
    st = p.stat()
    new = rec(3, lr=0.5) + rec(1, lr=0.5)
    assert len(new) == st.st_size
    with open(p, "r+b") as f:
        f.write(new)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # coarse clocks
    assert steps_of(drain(t)) == [3, 1]


def test_rotation_rename_away_and_new_file(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_bytes(rec(0) + rec(1))
    t = FileTailer(p, jsonl)
    drain(t)
    p.rename(tmp_path / "m.jsonl.1")
    p.write_bytes(rec(0) + rec(1) + rec(2) + rec(3))  # longer than before, new inode
    items = drain(t)
    assert steps_of(items) == [0, 1, 2, 3]
    assert batches(items)[0].reset
    assert "replaced" in statuses(items)[0].message


def test_delete_and_recreate(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_bytes(rec(0) + rec(1))
    t = FileTailer(p, jsonl)
    drain(t)
    p.unlink()
    (s,) = statuses(drain(t))
    assert s.state == "waiting" and str(p) in s.message and "deleted" in s.message
    assert drain(t) == []  # reported once, not on every poll
    p.write_bytes(rec(5))  # may well get the same inode back
    items = drain(t)
    assert [s.state for s in statuses(items)] == ["appeared", "reset"]
    assert steps_of(items) == [5] and batches(items)[0].reset
    # delete + re-create between two polls, new file longer than the old offset
    p.unlink()
    p.write_bytes(b"".join(rec(s) for s in range(20, 30)))
    items = drain(t)
    assert steps_of(items) == list(range(20, 30)) and batches(items)[0].reset


def test_path_appears_later_file_and_directory(tmp_path: Path) -> None:
    p = tmp_path / "runs" / "a" / "m.jsonl"
    t = FileTailer(p, jsonl)
    (s,) = statuses(drain(t))
    assert s.state == "waiting" and "does not exist yet" in s.message
    p.parent.mkdir(parents=True)
    p.write_bytes(rec(0)[:5])
    items = drain(t)
    assert [s.state for s in statuses(items)] == ["appeared"] and steps_of(items) == []
    append(p, rec(0)[5:])
    assert steps_of(drain(t)) == [0]


# ---------------------------------------------------------------------- backlog
class RecordingReader:
    """A lines reader wrapper that remembers what it was handed."""

    kind = "lines"
    format = "jsonl"

    def __init__(self, path: Path) -> None:
        self.inner = JsonlParser(str(path))
        self.sizes: list[int] = []

    def parse(self, data: bytes, first_line: int = 1, *, reset: bool = False) -> RecordBatch:
        self.sizes.append(len(data))
        assert data == b"" or data.endswith(b"\n")
        return self.inner.parse(data, first_line, reset=reset)


def test_large_backlog_streams_in_bounded_batches(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    n = 20_000
    p.write_bytes(b"".join(rec(i) for i in range(n)))
    size = p.stat().st_size
    reader = RecordingReader(p)
    t = FileTailer(p, reader, chunk_bytes=64 << 10)
    got: list[int] = []
    fractions = []
    while True:
        got += steps_of(t.read())
        fractions.append(t.progress.fraction)
        if not t.has_more:
            break
    assert got == list(range(n))
    assert len(reader.sizes) >= size // (64 << 10)
    assert max(reader.sizes) <= (64 << 10) + len(rec(n))  # a chunk plus the line it cut
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and fractions[0] < 0.2


def test_overlong_line_is_reported_and_numbering_continues(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_bytes(rec(0) + b"x" * 5000 + b"\n" + rec(1) + b'{"event": "eval", "step": 2}\n')
    t = FileTailer(p, jsonl, chunk_bytes=1000, max_line_bytes=1500)
    items = drain(t)
    assert steps_of(items) == [0, 1, 2]
    assert [m.line for b in batches(items) for m in b.malformed] == [2]
    assert [e.line for b in batches(items) for e in b.events] == [4]


# ---------------------------------------------------------------------- snapshot and stream
class FlakySnapshot:
    """A snapshot reader that sees the file half-written on its first call."""

    kind = "snapshot"
    format = "fake-json"

    def __init__(self) -> None:
        self.calls = 0
        self.returned = 0

    def parse_snapshot(self, data: bytes) -> RecordBatch | None:
        self.calls += 1
        if self.calls == 1:
            return None
        steps = json.loads(data)["steps"][self.returned :]
        self.returned += len(steps)
        return RecordBatch(
            source="s", first_record=0, steps=np.array(steps, dtype=np.int64),
            times=np.zeros(len(steps)), segments=np.zeros(len(steps), dtype=np.int32),
            series={}, format=self.format,
        )


def test_snapshot_retried_when_half_written(tmp_path: Path) -> None:
    p = tmp_path / "state.json"
    p.write_text(json.dumps({"steps": [1, 2]}))
    reader = FlakySnapshot()
    sink = Sink()
    with sink.follower(poll_interval=30.0) as f:  # only the retry timer can make it read again
        f.follow(p, reader)
        wait_until(lambda: sink.steps() == [1, 2], what="snapshot retry")
        calls = reader.calls
        f.poll_now()
        assert reader.calls == calls  # unchanged file: not re-read
        p.write_text(json.dumps({"steps": [1, 2, 3, 4]}))
        f.wake()
        wait_until(lambda: sink.steps() == [1, 2, 3, 4], what="snapshot update")


class BytesStream:
    kind = "stream"
    format = "fake-stream"

    def __init__(self) -> None:
        self.data = bytearray()
        self.resets = 0

    def feed(self, data: bytes, *, reset: bool = False) -> RecordBatch:
        if reset:
            self.resets += 1
            self.data.clear()
        self.data += data
        return empty_batch("s", reset=reset)


def test_stream_gets_new_bytes_and_resets(tmp_path: Path) -> None:
    p = tmp_path / "events.bin"
    rng = random.Random(1)
    blob = bytes(rng.randrange(256) for _ in range(5000))
    p.write_bytes(blob[:1234])
    reader = BytesStream()
    t = FileTailer(p, reader, chunk_bytes=1000)
    drain(t)
    append(p, blob[1234:])
    drain(t)
    assert bytes(reader.data) == blob and reader.resets == 0
    p.write_bytes(blob[:10])
    items = drain(t)
    assert bytes(reader.data) == blob[:10] and reader.resets == 1 and batches(items)[0].reset


# ---------------------------------------------------------------------- errors
def test_unreadable_file_reports_and_keeps_watching(tmp_path: Path, monkeypatch) -> None:
    p = tmp_path / "m.jsonl"
    p.write_bytes(rec(0))
    os.chmod(p, 0)
    if os.access(p, os.R_OK):  # root reads anything: make the open fail instead
        real = tailer_mod._open_ro

        def deny(path: Path) -> int:
            if Path(path) == p and not os.stat(p).st_mode & 0o444:
                raise PermissionError(13, "Permission denied", str(path))
            return real(path)

        monkeypatch.setattr(tailer_mod, "_open_ro", deny)
    sink = Sink()
    with sink.follower(poll_interval=0.02) as f:
        f.follow(p, jsonl)
        wait_until(lambda: "error" in sink.states(str(p)), what="error status")
        (err,) = [s for s in sink.status if s.state == "error"]
        assert str(p) in err.message and "chmod" in err.message and "\n" not in err.message
        append(p, rec(1))
        os.chmod(p, 0o644)
        wait_until(lambda: sink.steps() == [0, 1], what="records after chmod")
        assert sink.states(str(p)) == ["error", "appeared"]


def test_failing_reader_and_callback_do_not_kill_the_worker(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_bytes(rec(0))

    class Boom(JsonlParser):
        def parse(self, data: bytes, first_line: int = 1, *, reset: bool = False) -> RecordBatch:
            if b'"step": 1,' in data:
                raise RuntimeError("reader bug")
            return super().parse(data, first_line, reset=reset)

    seen: list[int] = []
    sink = Sink()

    def on_batch(path: str, b: RecordBatch) -> None:
        if 2 in b.steps.tolist():
            raise ValueError("consumer bug")
        seen.extend(b.steps.tolist())

    with Follower(on_batch=on_batch, on_status=sink.on_status, poll_interval=0.02) as f:
        f.follow(p, Boom(str(p)))
        wait_until(lambda: seen == [0])
        append(p, rec(1))
        wait_until(lambda: len(sink.states(str(p))) == 1, what="reader error")
        append(p, rec(2))
        wait_until(lambda: len(sink.states(str(p))) == 2, what="callback error")
        append(p, rec(3))
        wait_until(lambda: seen == [0, 3], what="recovery")
    msgs = [s.message for s in sink.status]
    assert "2-2" in msgs[0] and "reader bug" in msgs[0]
    assert "consumer bug" in msgs[1]


# ---------------------------------------------------------------------- wake-ups
def _writer(path: Path, n: int, seed: int, done: threading.Event) -> threading.Thread:
    """Appends ``n`` records in random bursts, often splitting a line across two writes."""

    def run() -> None:
        rng = random.Random(seed)
        pending = b"".join(rec(i) for i in range(n))
        with open(path, "ab", buffering=0) as f:
            while pending:
                k = rng.randint(1, 200)
                f.write(pending[:k])
                pending = pending[k:]
                if rng.random() < 0.05:
                    time.sleep(rng.random() * 0.01)  # the writer's own pace, not a wait
        done.set()

    return threading.Thread(target=run, name="test-writer")


def test_slow_polling_with_busy_writer_loses_and_doubles_nothing(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.touch()
    sink = Sink()
    done = threading.Event()
    n = 3000
    w = _writer(p, n, seed=7, done=done)
    with sink.follower(poll_interval=0.03) as f:  # no events at all: polls only
        f.follow(p, jsonl)
        w.start()
        w.join()
        wait_until(lambda: len(sink.steps()) >= n, what="all records")
        f.poll_now()
    assert sink.steps() == list(range(n))
    assert f.passes < n / 10  # many lines per read


def test_duplicate_wakeups_never_duplicate_records(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.touch()
    sink = Sink()
    done = threading.Event()
    n = 2000
    w = _writer(p, n, seed=11, done=done)
    with sink.follower(backstop=30.0) as f:
        f.follow(p, jsonl)
        stop_spam = threading.Event()

        def spam() -> None:
            while not stop_spam.is_set():
                f.wake()

        spammers = [threading.Thread(target=spam, name=f"spam{i}") for i in range(2)]
        for s in spammers:
            s.start()
        w.start()
        while not done.is_set():
            f.poll_now()  # reads from the test thread race the worker's
        w.join()
        stop_spam.set()
        for s in spammers:
            s.join()
        wait_until(lambda: len(sink.steps()) >= n, what="all records")
    assert sink.steps() == list(range(n))


def test_events_wake_the_worker_and_follow_a_new_directory(tmp_path: Path) -> None:
    """With a 60 s backstop, only file events can deliver these records in time."""
    p = tmp_path / "run" / "deep" / "m.jsonl"
    sink = Sink()
    with sink.follower(backstop=60.0) as f:
        f.follow(p, jsonl)
        wait_until(lambda: sink.states(str(p)) == ["waiting"], what="waiting")
        p.parent.mkdir(parents=True)
        p.write_bytes(rec(0))
        wait_until(lambda: sink.steps() == [0], what="record in new directory")
        for i in range(1, 200):
            append(p, rec(i))
        wait_until(lambda: sink.steps() == list(range(200)), what="appended records")
        p.rename(p.with_name("old.jsonl"))
        p.write_bytes(rec(0))
        wait_until(lambda: len(sink.steps()) == 201, what="record after rotation")
        passes = f.passes
        # the whole directory goes and comes back: the watch must be re-created
        shutil.rmtree(tmp_path / "run")
        wait_until(lambda: sink.states(str(p))[-1] == "waiting", what="deleted")
        p.parent.mkdir(parents=True)
        p.write_bytes(rec(42))
        wait_until(lambda: sink.steps()[-1:] == [42], what="record in re-created directory")
        # and once more with no pause: the directory is replaced between two passes
        shutil.rmtree(tmp_path / "run")
        p.parent.mkdir(parents=True)
        p.write_bytes(rec(50))
        wait_until(lambda: sink.steps()[-1:] == [50], what="record after quick replace")
        append(p, rec(51))
        wait_until(lambda: sink.steps()[-1:] == [51], what="append in replaced directory")
    assert any(b.steps.tolist() == [0] and b.reset for _p, b in sink.batches)
    assert passes < 100  # 200 appends merged into far fewer reads


def test_watch_failure_falls_back_to_backstop(tmp_path: Path) -> None:
    def broken() -> Observer:
        raise OSError(28, "inotify watch limit reached")

    p = tmp_path / "m.jsonl"
    p.write_bytes(rec(0))
    sink = Sink()
    with sink.follower(backstop=0.05, wake_source=DirWatcher(lambda: None, observer_factory=broken)) as f:
        f.follow(p, jsonl)
        append(p, rec(1))
        wait_until(lambda: sink.steps() == [0, 1], what="records by polling")
    (notice,) = [s for s in sink.status if s.state == "notice"]
    assert "watch limit" in notice.message and "polling" in notice.message


def test_finish_hands_on_the_unterminated_last_line(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_bytes(rec(0) + b'{"event": "run_end", "step": 1}')
    sink = Sink()
    with sink.follower(poll_interval=0.02) as f:
        f.follow(p, jsonl)
        wait_until(lambda: sink.steps() == [0], what="first record")
        f.finish(p)
        wait_until(lambda: sink.steps() == [0, 1], what="last line after finish")
        with pytest.raises(ValueError, match="already followed"):
            f.follow(p, jsonl)


def test_wakeups_close_together_are_merged(tmp_path: Path) -> None:
    """A writer appending every ~1 ms for 0.3 s: reads happen at most every 50 ms."""
    p = tmp_path / "m.jsonl"
    p.touch()
    sink = Sink()
    n = 300
    with sink.follower(backstop=60.0, batch_interval=0.05) as f:
        f.follow(p, jsonl)
        wait_until(lambda: f.passes >= 1, what="first pass")
        start = f.passes
        with open(p, "ab", buffering=0) as w:
            for i in range(n):
                w.write(rec(i))
                time.sleep(0.001)  # the writer's pace, not a wait for a condition
        wait_until(lambda: len(sink.steps()) == n, what="all records")
        passes = f.passes - start
    assert sink.steps() == list(range(n))
    assert passes < n / 5, f"{passes} read passes for {n} appends"


def test_stop_joins_everything_quickly(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    f = Follower(on_batch=lambda p, b: None)
    f.follow(tmp_path / "m.jsonl", jsonl)
    f.follow_text(tmp_path / "console.log")
    f.start()
    wait_until(lambda: len(set(threading.enumerate()) - before) >= 2, what="threads")
    t0 = time.monotonic()
    f.stop()
    assert time.monotonic() - t0 < 1.0
    assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]


def test_many_files_round_robin_and_progress(tmp_path: Path) -> None:
    big, small = tmp_path / "metrics.jsonl", tmp_path / "metrics.rank1.jsonl"
    big.write_bytes(b"".join(rec(i) for i in range(5000)))
    small.write_bytes(rec(0))
    order: list[str] = []
    f = Follower(on_batch=lambda p, b: order.append(p), chunk_bytes=16 << 10, poll_interval=1)
    f.follow(big, jsonl)
    f.follow(small, jsonl)
    f.poll_now()
    assert order.index(str(small)) <= 1  # not stuck behind the big backlog
    prog = f.progress()
    assert prog[str(big)].fraction == 1.0 and prog[str(small)].bytes_read == len(rec(0))
