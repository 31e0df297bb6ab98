"""trainwatch: watch neural-network training live, in the terminal.

``from trainwatch import RunWriter`` is the writer any training script can use. This package's
top level stays stdlib-only (numpy is imported by the stream core, lazily from here) so that a
training script pays nothing to import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["RunWriter", "__version__"]

if TYPE_CHECKING:
    from trainwatch.writer import RunWriter


def __getattr__(name: str) -> Any:
    if name == "RunWriter":
        from trainwatch.writer import RunWriter

        return RunWriter
    raise AttributeError(f"module 'trainwatch' has no attribute {name!r}")
