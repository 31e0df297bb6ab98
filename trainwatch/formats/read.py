"""Read a whole closed file with the right reader (for ``trainwatch inspect`` / ``check``).

:func:`iter_file` / :func:`iter_with` yield the batches one read at a time, so a command that
feeds them on and drops them holds one chunk's batch at a time; :func:`read_file` /
:func:`read_with` are the same as lists.

Line readers get chunks of whole lines (4 MiB by default) with the number of each chunk's first
line, and the final line even without its newline (the file is finished). The file is read into
one reusable buffer; a reader with ``parse_buffer`` (JSONL) parses each chunk in place there and
says how many lines it held, the others get a copy of the chunk as ``bytes``. A snapshot file is
parsed once; a file that is not valid at all is an error here (there is no "retry later").
An event file is fed in chunks, and a truncated final frame is reported as malformed. A stream
that also carries the run's console (a W&B log: its reader has ``take_text``) hands the lines
to ``on_text`` as they complete.

Missing and unreadable files raise ``FileNotFoundError`` / ``PermissionError`` (with the path)
for the CLI to turn into one-line errors; an unknown format raises ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from trainwatch.batch import RecordBatch
from trainwatch.formats.base import Reader

CHUNK_BYTES = 4 << 20
TextCallback = Callable[[Sequence[str], int], None]
"""(console lines, 1-based number of the first)."""


def read_file(
    path: Path, *, fmt: str | None = None, chunk_bytes: int = CHUNK_BYTES,
    on_text: TextCallback | None = None,
) -> list[RecordBatch]:
    """Every batch of ``path``, in order (format detected unless ``fmt`` is given)."""
    return list(iter_file(path, fmt=fmt, chunk_bytes=chunk_bytes, on_text=on_text))


def iter_file(
    path: Path, *, fmt: str | None = None, chunk_bytes: int = CHUNK_BYTES,
    on_text: TextCallback | None = None,
) -> Iterator[RecordBatch]:
    """:func:`read_file` one batch at a time, read as it is asked for."""
    from trainwatch.formats.detect import make_reader  # detect re-exports this module's API

    path = Path(path)
    reader = make_reader(path, fmt=fmt)
    return iter_with(reader, path, chunk_bytes=chunk_bytes, on_text=on_text)


def read_with(reader: Reader, path: Path, *, chunk_bytes: int = CHUNK_BYTES,
              on_text: TextCallback | None = None) -> list[RecordBatch]:
    """Every batch of ``path`` read by ``reader`` (a fresh one of any kind)."""
    return list(iter_with(reader, path, chunk_bytes=chunk_bytes, on_text=on_text))


def iter_with(
    reader: Reader, path: Path, *, chunk_bytes: int = CHUNK_BYTES,
    on_text: TextCallback | None = None,
) -> Iterator[RecordBatch]:
    """:func:`read_with` one batch at a time. A snapshot file is parsed (and a bad one raises)
    before the first batch is asked for; the other kinds read as they are asked."""
    if reader.kind == "snapshot":
        batch = reader.parse_snapshot(path.read_bytes())  # type: ignore[union-attr]
        if batch is None:
            raise ValueError(
                f"{path}: not a complete {reader.format} file (empty or cut short); "
                "if it is being written, read it again once it is saved"
            )
        return iter((batch,))
    if reader.kind == "stream":
        return _read_stream(reader, path, chunk_bytes, on_text)
    return _read_lines(reader, path, chunk_bytes)


def _read_stream(reader: Reader, path: Path, chunk_bytes: int,
                 on_text: TextCallback | None) -> Iterator[RecordBatch]:
    """An event file's batches that carry something (it is mostly frames without scalars); its
    first batch when none does. The console lines a W&B log carries go to ``on_text``."""
    take_text = getattr(reader, "take_text", None) if on_text is not None else None
    first: RecordBatch | None = None
    kept = 0
    with path.open("rb") as f:
        while True:
            chunk = f.read(chunk_bytes)
            if chunk:
                batch = reader.feed(chunk)  # type: ignore[union-attr]
            else:
                finish = getattr(reader, "finish", None)
                if finish is None:
                    break
                batch = finish()
            text = take_text() if take_text is not None else None
            if text is not None:
                on_text(*text)  # type: ignore[misc]
            if first is None:
                first = batch
            if not batch.is_empty() or batch.meta:
                kept += 1
                yield batch
            if not chunk:
                break
    if not kept and first is not None:
        yield first


def _read_lines(reader: Reader, path: Path, chunk_bytes: int) -> Iterator[RecordBatch]:
    """Batches of whole lines, read into one buffer that is refilled, never copied whole.

    The unfinished line at the end of a read moves to the buffer's front and the next read lands
    behind it; a line longer than the buffer doubles it.
    """
    parse_buffer = getattr(reader, "parse_buffer", None)

    def parse(chunk: memoryview, line: int) -> tuple[RecordBatch, int]:
        if parse_buffer is not None:
            return parse_buffer(chunk, line)  # type: ignore[no-any-return]
        whole = bytes(chunk)
        return reader.parse(whole, line), whole.count(b"\n")  # type: ignore[union-attr]

    with path.open("rb") as f:
        buf = bytearray(max(chunk_bytes, 1))
        view = memoryview(buf)
        held = 0  # bytes of an unfinished line at the front of buf
        line = 1
        while True:
            if held == len(buf):  # one line fills the buffer: make room for the rest of it
                bigger = bytearray(2 * len(buf))
                bigger[:held] = view
                buf, view = bigger, memoryview(bigger)
            got = f.readinto(view[held:])
            if not got:
                break
            end = held + got
            cut = buf.rfind(b"\n", held, end) + 1  # the held bytes have no newline
            if not cut:
                held = end
                continue
            batch, n_lines = parse(view[:cut], line)
            yield batch
            line += n_lines
            held = end - cut
            view[:held] = view[cut:end]
        if held:  # the final line, without its newline
            yield parse(view[:held], line)[0]
