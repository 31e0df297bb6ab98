"""A small YAML emitter for ``config.yaml``: the writer must stay stdlib-only (no PyYAML), and
JSON is not enough because PyYAML (YAML 1.1) reads JSON's ``1e-05`` back as a string."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from trainwatch.plainvalues import MAX_DEPTH, NotANumber, as_number, safe_repr

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*\Z")
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})
"""Plain words YAML 1.1 reads as bools or null: such keys are quoted."""
_YAML_UNSAFE = re.compile(
    "[^\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)


def _yaml_str(s: str) -> str:
    # json's escapes are YAML double-quoted escapes; what json leaves raw but YAML would not
    # read back as-is (C1 controls, line/paragraph separators, BOM, surrogates) becomes \uXXXX
    return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(s, ensure_ascii=False))


def _yaml_key(k: Any) -> str:
    s = k if type(k) is str else str(k)
    if _PLAIN_KEY.match(s) and s.lower() not in _YAML_WORDS:
        return s
    return _yaml_str(s)


def _yaml_float(x: float) -> str:
    if math.isnan(x):
        return ".nan"
    if math.isinf(x):
        return ".inf" if x > 0 else "-.inf"
    r = repr(float(x))
    if "e" in r:  # YAML 1.1 needs a dot in the mantissa: 1e-05 -> 1.0e-05
        mant, exp = r.split("e")
        if "." not in mant:
            r = f"{mant}.0e{exp}"
    return r


def _yaml_scalar(v: Any) -> str:
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, int):
        return int.__repr__(v)  # an IntEnum's str() is its name
    if isinstance(v, float):
        return _yaml_float(v)
    if isinstance(v, str):
        return _yaml_str(v)
    if isinstance(v, Mapping):
        return "{}"
    if isinstance(v, (list, tuple)):
        return "[]"
    try:
        return _yaml_scalar(as_number(v))
    except NotANumber:
        return _yaml_str(safe_repr(v))


def _yaml_is_block(v: Any) -> bool:
    return isinstance(v, (Mapping, list, tuple)) and len(v) > 0


def _yaml_lines(obj: Any, indent: int, depth: int, out: list[str]) -> None:
    pad = " " * indent
    if depth > MAX_DEPTH:  # a cycle, or absurd nesting
        out.append(pad + _yaml_str(safe_repr(obj)))
        return
    if isinstance(obj, Mapping) and obj:
        for k, v in obj.items():
            if _yaml_is_block(v):
                out.append(f"{pad}{_yaml_key(k)}:")
                _yaml_lines(v, indent + 2, depth + 1, out)
            else:
                out.append(f"{pad}{_yaml_key(k)}: {_yaml_scalar(v)}")
    elif isinstance(obj, (list, tuple)) and obj:
        for v in obj:
            if _yaml_is_block(v):
                sub: list[str] = []
                _yaml_lines(v, indent + 2, depth + 1, sub)
                out.append(f"{pad}- {sub[0][indent + 2 :]}")  # first line shares the dash's line
                out.extend(sub[1:])
            else:
                out.append(f"{pad}- {_yaml_scalar(v)}")
    else:
        out.append(pad + _yaml_scalar(obj))


def to_yaml(obj: Any) -> str:
    """Block-style YAML for dict/list/str/int/float/bool/None that PyYAML (1.1) and YAML 1.2
    loaders both read back to the same values. Strings are always double-quoted; other values
    go through :func:`as_number`, else their ``repr()``."""
    out: list[str] = []
    _yaml_lines(obj, 0, 0, out)
    return "\n".join(out) + "\n"
