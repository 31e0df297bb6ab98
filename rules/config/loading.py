"""Loading the rules config: the packaged ``configs/rules.yaml`` overridden key by key by a user file.

    cfg = load_rules_config(Path("my_rules.yaml"))

A user file may set any subset of keys; ``<rule_id>: false`` is short for ``enabled: false``.
It may also add metric names to roles (``roles:``) and simple threshold rules (``custom:``).
Every problem is a :class:`ConfigError` with one line naming the file and the dotted key.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from trainwatch.roles import DEFAULT_ROLES, ROLES, RoleTable
from trainwatch.rules.config.models import RULE_IDS, RULE_MODELS
from trainwatch.rules.config.schema import (
    Bad,
    Check,
    ConfigError,
    RuleBase,
    build_model,
    validate_section,
)

PACKAGED_NAME = "rules.yaml"
_ID = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_CUSTOM_KEYS = ("id", "metric", "above", "below", "for_steps", "severity", "message", "enabled")


@dataclass(frozen=True)
class CustomRuleConfig:
    """A user's threshold rule: ``metric`` above/below a value for ``for_steps`` steps."""

    id: str
    metric: str
    """Exact series name, or a role name (``loss``, ``grad_norm``...)."""
    above: float | None
    below: float | None
    for_steps: int
    """Steps the condition must hold (1: fire at once)."""
    severity: str
    message: str | None
    """One sentence; the fields of :data:`MESSAGE_FIELDS` (``{metric}``, ``{value}``...) are
    filled in."""
    enabled: bool = True


MESSAGE_FIELDS = {"metric": "loss", "value": "1.5", "threshold": "1", "step": 1, "since": 1,
                  "for_steps": 1}
"""The fields a custom rule's message may name (``rules.custom`` fills them), with sample values
that the template is tried with when the file is read."""


def _message_error(msg: str) -> str | None:
    """Why a custom rule's message template would not render, or None. Checked when the file
    is read: at alert time a bad template could only be printed raw, braces and all."""
    try:
        string.Formatter().vformat(msg, (), MESSAGE_FIELDS)
    except KeyError as e:
        return (f"unknown field {{{e.args[0]}}} (known: "
                f"{', '.join('{' + k + '}' for k in MESSAGE_FIELDS)}; write {{{{ for a brace)")
    except (ValueError, IndexError, AttributeError, TypeError) as e:
        return (f"{e} ({{value}} and {{threshold}} come as text, formatted for people; "
                f"write {{{{ and }}}} for literal braces)")
    return None


@dataclass(frozen=True)
class RulesConfig:
    """Every rule's validated settings, plus the role table and custom rules."""

    rules: Mapping[str, RuleBase]
    """Built-in rule id -> its config model."""
    custom: tuple[CustomRuleConfig, ...] = ()
    roles: RoleTable = field(default_factory=lambda: DEFAULT_ROLES)
    extra_roles: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    """Files the settings came from, packaged first."""

    def __getattr__(self, name: str) -> Any:
        # cfg.loss_spike.z_threshold reads naturally; only rule ids resolve here
        rules = self.__dict__.get("rules")
        if rules is not None and name in rules:
            return rules[name]
        raise AttributeError(name)

    def rule(self, rule_id: str) -> RuleBase:
        return self.rules[rule_id]

    def ids(self) -> tuple[str, ...]:
        """Every rule id this config knows: built-in, then custom."""
        return RULE_IDS + tuple(c.id for c in self.custom)


# --------------------------------------------------------------------------- loading
def _read(path: Path, where: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text") from None
    except OSError as e:
        raise ConfigError(f"{where}: cannot read ({e.strerror or e})") from None


def _parse(text: str, where: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = (e.problem or e.context or "syntax error").strip()
        raise ConfigError(f"{where}{line}: invalid YAML: {problem}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: invalid YAML: {str(e).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}: expected a mapping of rule ids to settings, got {type(data).__name__}"
        )
    return data


def _sections(data: Mapping[str, Any], where: str) -> tuple[dict[str, dict[str, Any]], Any, Any]:
    """Validate one file's top level; returns (rule sections, custom, roles) as given."""
    rules: dict[str, dict[str, Any]] = {}
    for key, val in data.items():
        k = str(key)
        if k in ("custom", "roles"):
            continue
        if k not in RULE_MODELS:
            raise ConfigError(
                f"{where}: {k}: unknown key (expected a rule id ({', '.join(RULE_IDS)}), "
                f"custom or roles)"
            )
        if isinstance(val, bool):
            val = {"enabled": val}
        elif val is None:
            val = {}
        if not isinstance(val, dict):
            raise ConfigError(f"{where}: {k}: expected a mapping of settings, got {val!r:.40}")
        rules[k] = validate_section(RULE_MODELS[k], val, where, k)
    return rules, data.get("custom"), data.get("roles")


def _roles(raw: Any, where: str) -> dict[str, tuple[str, ...]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: roles: expected a mapping of role to metric names")
    out: dict[str, tuple[str, ...]] = {}
    for role, names in raw.items():
        if role not in ROLES:
            raise ConfigError(
                f"{where}: roles.{role}: unknown role (expected one of {', '.join(ROLES)})"
            )
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"{where}: roles.{role}: expected a list of metric names, got {names!r:.40}")
        out[str(role)] = tuple(names)
    return out


def _custom(raw: Any, where: str, taken: set[str]) -> list[CustomRuleConfig]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: custom: expected a list of rules, got {type(raw).__name__}")
    out: list[CustomRuleConfig] = []
    for i, item in enumerate(raw):
        key = f"custom[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: {key}: expected a mapping (id, metric, above/below...)")
        for k in item:
            if k not in _CUSTOM_KEYS:
                raise ConfigError(
                    f"{where}: {key}.{k}: unknown key (expected one of {', '.join(_CUSTOM_KEYS)})"
                )
        rid = item.get("id")
        if not isinstance(rid, str) or not _ID.match(rid):
            raise ConfigError(
                f"{where}: {key}.id: expected a lower-case id like 'loss_too_high', got {rid!r:.40}"
            )
        if rid in taken:
            raise ConfigError(f"{where}: {key}.id: {rid!r} is already a rule id")
        metric = item.get("metric")
        if not isinstance(metric, str) or not metric:
            raise ConfigError(f"{where}: {key}.metric: expected a metric name, got {metric!r:.40}")
        vals: dict[str, Any] = {}
        checks = {
            "above": Check("optional_number"),
            "below": Check("optional_number"),
            "for_steps": Check("integer", ge=1),
            "severity": Check("severity"),
            "enabled": Check("bool"),
        }
        for k, c in checks.items():
            if k not in item:
                continue
            try:
                vals[k] = c.coerce(item[k])
            except Bad:
                raise ConfigError(
                    f"{where}: {key}.{k}: expected {c.expected()}, got {item[k]!r:.40}"
                ) from None
        if vals.get("above") is None and vals.get("below") is None:
            raise ConfigError(f"{where}: {key}: needs 'above' or 'below' (a threshold)")
        msg = item.get("message")
        if msg is not None and not isinstance(msg, str):
            raise ConfigError(f"{where}: {key}.message: expected a string, got {msg!r:.40}")
        why = _message_error(msg) if msg else None
        if why:
            raise ConfigError(f"{where}: {key}.message: {why}")
        taken.add(rid)
        out.append(CustomRuleConfig(
            id=rid, metric=metric, above=vals.get("above"), below=vals.get("below"),
            for_steps=vals.get("for_steps", 1), severity=vals.get("severity", "warning"),
            message=msg, enabled=vals.get("enabled", True),
        ))
    return out


def load_rules_config(
    user_file: Path | str | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
) -> RulesConfig:
    """The packaged defaults, overridden per key by ``user_file`` and then by ``overrides``.

    ``overrides`` is a mapping shaped like a rules file (for tests and programmatic use).
    """
    packaged = resources.files("trainwatch.configs").joinpath(PACKAGED_NAME)
    layers: list[tuple[str, dict[str, Any]]] = [
        (f"{PACKAGED_NAME} (packaged)", _parse(packaged.read_text(encoding="utf-8"),
                                               f"{PACKAGED_NAME} (packaged)"))
    ]
    if user_file is not None:
        where = str(user_file)
        layers.append((where, _parse(_read(Path(user_file), where), where)))
    if overrides is not None:
        layers.append(("<overrides>", dict(overrides)))

    merged: dict[str, dict[str, Any]] = {rid: {} for rid in RULE_IDS}
    origin: dict[tuple[str, str], str] = {}
    """(rule id, key) -> the file that set it last (what an error about it names)."""
    extra_roles: dict[str, tuple[str, ...]] = {}
    custom: list[CustomRuleConfig] = []
    taken = set(RULE_IDS)
    for where, data in layers:
        rules, raw_custom, raw_roles = _sections(data, where)
        for rid, section in rules.items():
            merged[rid].update(section)
            origin.update({(rid, k): where for k in section})
        for role, names in _roles(raw_roles, where).items():
            extra_roles[role] = names + tuple(n for n in extra_roles.get(role, ()) if n not in names)
        custom.extend(_custom(raw_custom, where, taken))

    built = {
        rid: build_model(RULE_MODELS[rid], merged[rid], layers[0][0], rid) for rid in RULE_IDS
    }
    rank = {where: i for i, (where, _d) in enumerate(layers)}
    for rid, model in built.items():
        # keys that are each valid but not together (checked once every layer is in)
        bad = model.conflict() if hasattr(model, "conflict") else None
        if bad is not None:
            keys, why = bad
            # named where the last of them was set: that file made the pair clash
            where = max((origin.get((rid, k), layers[0][0]) for k in keys), key=rank.__getitem__)
            raise ConfigError(f"{where}: {rid}.{keys[0]}: {why}")
    table = DEFAULT_ROLES.extended(extra_roles) if extra_roles else DEFAULT_ROLES
    return RulesConfig(
        rules=MappingProxyType(built),  # read-only: a config is shared by engines
        custom=tuple(custom),
        roles=table,
        extra_roles=extra_roles,
        sources=tuple(w for w, _d in layers),
    )
