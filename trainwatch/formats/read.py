"""Read a whole closed file with the right reader (for ``trainwatch inspect`` / ``check``).

Line readers get chunks of whole lines (4 MiB by default) with the number of each chunk's first
line, and the final line even without its newline (the file is finished). A snapshot file is
parsed once; a file that is not valid at all is an error here (there is no "retry later").
An event file is fed in chunks, and a truncated final frame is reported as malformed.

Missing and unreadable files raise ``FileNotFoundError`` / ``PermissionError`` (with the path)
for the CLI to turn into one-line errors; an unknown format raises ``ValueError``.
"""

from __future__ import annotations

from pathlib import Path

from trainwatch.batch import RecordBatch
from trainwatch.formats.base import Reader

CHUNK_BYTES = 4 << 20


def read_file(
    path: Path, *, fmt: str | None = None, chunk_bytes: int = CHUNK_BYTES
) -> list[RecordBatch]:
    """Every batch of ``path``, in order (format detected unless ``fmt`` is given)."""
    from trainwatch.formats.detect import make_reader  # detect re-exports this module's API

    path = Path(path)
    reader = make_reader(path, fmt=fmt)
    return read_with(reader, path, chunk_bytes=chunk_bytes)


def read_with(reader: Reader, path: Path, *, chunk_bytes: int = CHUNK_BYTES) -> list[RecordBatch]:
    """Every batch of ``path`` read by ``reader`` (a fresh one of any kind)."""
    out: list[RecordBatch] = []
    if reader.kind == "snapshot":
        batch = reader.parse_snapshot(path.read_bytes())  # type: ignore[union-attr]
        if batch is None:
            raise ValueError(
                f"{path}: not a complete {reader.format} file (empty or cut short); "
                "if it is being written, read it again once it is saved"
            )
        return [batch]
    with path.open("rb") as f:
        if reader.kind == "stream":
            while chunk := f.read(chunk_bytes):
                out.append(reader.feed(chunk))  # type: ignore[union-attr]
            finish = getattr(reader, "finish", None)
            if finish is not None:
                out.append(finish())
            # an event file is mostly frames without scalars: keep the batches that carry something
            return [b for b in out if not b.is_empty() or b.meta] or out[:1]
        line = 1
        tail = b""
        while True:
            chunk = f.read(chunk_bytes)
            if not chunk:
                break
            data = tail + chunk
            cut = data.rfind(b"\n") + 1
            if cut == 0:  # no newline yet: a line longer than the chunk, keep reading
                tail = data
                continue
            whole, tail = data[:cut], data[cut:]
            out.append(reader.parse(whole, line))  # type: ignore[union-attr]
            line += whole.count(b"\n")
        if tail:
            out.append(reader.parse(tail, line))  # type: ignore[union-attr]
    return out
