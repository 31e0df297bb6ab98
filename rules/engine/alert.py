"""The value a rule returns when it detects something. Also the JSON record of ``check``.

Detecting is separate from what happens next (toast, bell, file, exit code): an Alert is plain data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["info", "warning", "error"]
SEVERITY_RANK: Mapping[str, int] = {"info": 0, "warning": 1, "error": 2}


@dataclass(frozen=True, slots=True)
class Cause:
    cause: str
    confidence: float
    """0..1: how much of the evidence points this way."""


@dataclass(frozen=True, slots=True)
class Alert:
    rule: str
    """Stable rule id, e.g. ``loss_spike`` (users' scripts depend on these)."""
    severity: Severity
    step: int
    time: float
    metric: str | None
    message: str
    """One sentence: what happened."""
    evidence: Mapping[str, Any] = field(default_factory=dict)
    """Window statistics and the values that triggered the rule."""
    causes: tuple[Cause, ...] = ()
    """Likely causes, most likely first."""
    fixes: tuple[str, ...] = ()
    """What to try, most useful first."""

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape; non-finite numbers become null (strict JSON)."""
        return {
            "rule": self.rule,
            "severity": self.severity,
            "step": self.step,
            "time": json_safe(self.time),
            "metric": self.metric,
            "message": self.message,
            "evidence": json_safe(dict(self.evidence)),
            "causes": [{"cause": c.cause, "confidence": round(c.confidence, 3)} for c in self.causes],
            "fixes": list(self.fixes),
        }


def json_safe(v: Any) -> Any:
    """A copy strict JSON can hold: non-finite floats become null, numpy scalars plain numbers."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    if hasattr(v, "item") and callable(v.item):  # numpy scalar
        return json_safe(v.item())
    return v
