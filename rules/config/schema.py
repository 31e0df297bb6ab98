"""Field checks for the rules' config models: what a YAML value must be, said in one line.

A config model is a frozen dataclass whose fields carry a :class:`Check` in their metadata
(``x: float = num(gt=0)``). :func:`build_model` turns a YAML mapping into the model, rejecting
unknown keys and bad values with a :class:`ConfigError` that names the file and the dotted key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, TypeVar

from trainwatch.roles import ROLES

SEVERITIES = ("info", "warning", "error")
T = TypeVar("T")


class ConfigError(ValueError):
    """A rules file is wrong; ``str(e)`` is one line naming the file and the key."""


class Bad(Exception):
    """Raised by a check with what was expected (the caller adds file, key and value)."""


def _show(v: Any) -> str:
    text = repr(v) if isinstance(v, str) else ("null" if v is None else str(v).lower()
                                               if isinstance(v, bool) else repr(v))
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Check:
    kind: str
    """number | integer | bool | severity | names | roles | optional_number | text"""
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def expected(self) -> str:
        bounds = [f"{op} {_fmt(b)}" for op, b in ((">", self.gt), (">=", self.ge),
                                                   ("<", self.lt), ("<=", self.le))
                  if b is not None]
        tail = (" " + " and ".join(bounds)) if bounds else ""
        return {
            "number": f"a number{tail}",
            "optional_number": f"null or a number{tail}",
            "integer": f"an integer{tail}",
            "bool": "true or false",
            "severity": "one of info, warning, error",
            "names": "a list of metric names",
            "roles": f"a list of roles ({', '.join(ROLES)})",
            "events": "a list of event names",
            "text": "a string",
        }[self.kind]

    def coerce(self, v: Any) -> Any:
        k = self.kind
        if k == "bool":
            if type(v) is bool:
                return v
            raise Bad
        if k == "severity":
            if isinstance(v, str) and v.strip().lower() in SEVERITIES:
                return v.strip().lower()
            raise Bad
        if k in ("names", "roles", "events"):
            if isinstance(v, str):
                v = [v]
            if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
                raise Bad
            out = tuple(x.strip() for x in v)
            if k == "roles" and any(x not in ROLES for x in out):
                raise Bad
            return out
        if k == "text":
            if isinstance(v, str):
                return v
            raise Bad
        if k == "optional_number" and v is None:
            return None
        x = _number(v)
        if k == "integer":
            if x is None or not float(x).is_integer():
                raise Bad
            x = int(x)
        elif x is None:
            raise Bad
        if (self.gt is not None and not x > self.gt) or (self.ge is not None and not x >= self.ge) \
                or (self.lt is not None and not x < self.lt) or (self.le is not None and not x <= self.le):
            raise Bad
        return x


def _fmt(b: float) -> str:
    return str(int(b)) if float(b).is_integer() else repr(b)


_NUMBER_TEXT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _number(v: Any) -> float | None:
    """A finite number; numeric strings too, because PyYAML reads ``1e-3`` (no dot) as a string."""
    if type(v) in (int, float):
        x = float(v)
    elif isinstance(v, str) and _NUMBER_TEXT.match(v.strip()):
        x = float(v.strip())
    else:
        return None
    return x if math.isfinite(x) else None


def _f(kind: str, **bounds: float | None) -> Any:
    return field(metadata={"check": Check(kind, **bounds)})


def num(*, gt: float | None = None, ge: float | None = None, lt: float | None = None,
        le: float | None = None) -> Any:
    return _f("number", gt=gt, ge=ge, lt=lt, le=le)


def opt_num(*, gt: float | None = None, ge: float | None = None) -> Any:
    return _f("optional_number", gt=gt, ge=ge)


def integer(*, ge: float | None = None, le: float | None = None) -> Any:
    return _f("integer", ge=ge, le=le)


def flag() -> Any:
    return _f("bool")


def severity() -> Any:
    return _f("severity")


def names() -> Any:
    return _f("names")


def roles() -> Any:
    return _f("roles")


def events() -> Any:
    return _f("events")


def text() -> Any:
    return _f("text")


@dataclass(frozen=True)
class RuleBase:
    """What every built-in rule's config has; each rule's module subclasses it with its own keys
    (the rule's parameters, beside the rule that reads them)."""

    enabled: bool = flag()
    severity: str = severity()
    """Severity of the rule's first alert in an episode (escalations are errors)."""


def check_of(f: Field[Any]) -> Check:
    return f.metadata["check"]


def validate_section(
    cls: type, data: Mapping[str, Any], where: str, key: str
) -> dict[str, Any]:
    """Check the keys ``data`` sets (a partial section); returns them coerced.

    ``where`` is the file as the user named it, ``key`` the section's dotted key.
    """
    known = {f.name: f for f in fields(cls)}
    out: dict[str, Any] = {}
    for k, v in data.items():
        f = known.get(str(k))
        if f is None:
            raise ConfigError(
                f"{where}: {key}.{k}: unknown key (expected one of {', '.join(known)})"
            )
        c = check_of(f)
        try:
            out[f.name] = c.coerce(v)
        except Bad:
            raise ConfigError(
                f"{where}: {key}.{k}: expected {c.expected()}, got {_show(v)}"
            ) from None
    return out


def build_model(cls: type[T], data: Mapping[str, Any], where: str, key: str) -> T:
    """The model from a complete, already validated section (a missing key is a packaging bug)."""
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kwargs[f.name] = data[f.name]
        elif f.default is not MISSING:
            kwargs[f.name] = f.default
        else:
            raise ConfigError(f"{where}: {key}.{f.name}: missing (every key needs a value)")
    return cls(**kwargs)
