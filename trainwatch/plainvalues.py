"""Turning arbitrary Python values (numpy/torch scalars, configs, odd objects) into plain JSON-able
values, without importing numpy or torch: duck typing only, so the writer stays stdlib-only."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

MAX_REPR = 200
"""Longest ``repr()`` written for a value that is not a number (a whole tensor would be huge)."""
MAX_DEPTH = 64
"""Nesting deeper than this (a cycle, most likely) is written as a repr() string."""
_NUMBER_TYPES = (int, float, bool)


class NotANumber(Exception):
    pass


def as_number(value: Any) -> Any:
    """The JSON-able stand-in for a value ``json`` cannot encode (numpy/torch scalars, Paths).

    Raises ``NotANumber`` when there is none. Duck-typed: ``.item()`` when it returns a plain
    number (numpy scalars, 0-d and 1-element arrays and tensors), else ``float()``.
    """
    item = getattr(value, "item", None)
    if item is not None:
        try:
            x = item()
        except Exception:  # noqa: BLE001 - any object's .item() may fail in any way
            # (a multi-element array or tensor, an unrelated method called item)
            x = None
        if type(x) in _NUMBER_TYPES:
            return x
    if isinstance(value, os.PathLike):
        p = os.fspath(value)
        if type(p) is str:
            return p
    try:
        return float(value)
    except Exception:  # noqa: BLE001 - __float__ of an arbitrary object
        raise NotANumber from None


def plain_config(config: Any, depth: int = 0) -> Any:
    """A run's config as plain dicts and lists: accepts any Mapping (OmegaConf's DictConfig
    too), dataclass instances, argparse Namespaces and non-string sequences, nested."""
    if depth > MAX_DEPTH:
        return safe_repr(config)
    if isinstance(config, Mapping):
        return {k: plain_config(v, depth + 1) for k, v in config.items()}
    if hasattr(config, "__dataclass_fields__") and not isinstance(config, type):
        import dataclasses

        fields = {f.name: getattr(config, f.name, None) for f in dataclasses.fields(config)}
        return plain_config(fields, depth + 1)
    if hasattr(config, "_get_kwargs"):  # argparse.Namespace
        return plain_config(vars(config), depth + 1)
    if isinstance(config, (list, tuple)) or (
        isinstance(config, Sequence) and not isinstance(config, (str, bytes, bytearray))
    ):
        return [plain_config(v, depth + 1) for v in config]
    return config


def safe_repr(v: Any) -> str:
    try:
        r = repr(v)
    except Exception:  # noqa: BLE001 - __repr__ of an arbitrary object
        r = f"<unrepresentable {type(v).__name__}>"
    return r if len(r) <= MAX_REPR else r[: MAX_REPR - 3] + "..."


def sanitise(obj: Any, depth: int = 0) -> Any:
    """A copy json can encode: keys as str, tuples as lists (the slow path for odd records)."""
    if depth > MAX_DEPTH:
        return safe_repr(obj)
    if isinstance(obj, Mapping):
        return {
            (k if k is None or type(k) in (str, int, float, bool) else str(k)): sanitise(
                v, depth + 1
            )
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [sanitise(v, depth + 1) for v in obj]
    return obj
