"""Finding and loading trainer configs: packaged names, YAML files with ``base``, ``--set``.

Every key is checked against the type of its default, so a typo or a wrong type is a one-line
error naming the key (and the file and line when it came from a file) instead of a silently
ignored setting. No torch here.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from trainwatch.trainer.config import (
    _CHOICES,
    TASK_SECTIONS,
    TASKS,
    CheckpointCfg,
    Config,
    ConfigError,
    DistCfg,
    EvalCfg,
    FaultCfg,
    LogCfg,
    TrainCfg,
    defaults_for,
)

# ---------------------------------------------------------------------------- finding files


def packaged_configs() -> Path:
    return Path(str(importlib.resources.files("trainwatch.configs")))


def resolve_config(ref: str, relative_to: Path | None = None) -> Path:
    """A config path from a path or a packaged name (``lstm_freq``, ``faults/nan``, ``nan``)."""
    p = Path(ref)
    candidates = [p, p.with_name(p.name + ".yaml")]
    if relative_to is not None and not p.is_absolute():
        candidates = [relative_to / c for c in candidates] + candidates
    for c in candidates:
        if c.is_file():
            return c
    root = packaged_configs()
    stem = ref.removesuffix(".yaml")
    for c in (root / f"{stem}.yaml", root / "faults" / f"{stem}.yaml"):
        if c.is_file():
            return c
    raise ConfigError(
        f"{ref}: no such config file or packaged config (packaged: {', '.join(list_packaged())})"
    )


def list_packaged() -> list[str]:
    root = packaged_configs()
    names = [p.stem for p in sorted(root.glob("*.yaml")) if p.stem != "rules"]
    names += [f"faults/{p.stem}" for p in sorted((root / "faults").glob("*.yaml"))]
    return names


# ---------------------------------------------------------------------------- loading


def load_config(ref: str | None, overrides: Sequence[str] = ()) -> Config:
    """Build the config from a file (or packaged name) and ``key=value`` overrides."""
    layers: list[tuple[dict[str, Any], str, dict[str, int]]] = []
    name = ""
    if ref is not None:
        path = resolve_config(ref)
        name = path.stem
        layers = _file_layers(path, seen=())
    sets = [_parse_set(s) for s in overrides]
    task = "mlp"
    for data, _src, _lines in layers:
        task = data.get("task", task)
    for key, raw in sets:
        if key == "task":
            task = raw
    if not isinstance(task, str) or task not in TASK_SECTIONS:
        raise ConfigError(f"task: unknown task {task!r} (expected one of {', '.join(TASKS)})")
    merged = defaults_for(task)
    for data, src, lines in layers:
        _merge(merged, data, src, lines, prefix="")
    for key, raw in sets:
        _apply_set(merged, key, raw)
    if not merged["name"]:
        merged["name"] = name or task
    cfg = _build(merged)
    _validate(cfg)
    return cfg


def _file_layers(path: Path, seen: tuple[Path, ...]) -> list[tuple[dict[str, Any], str, dict[str, int]]]:
    if path.resolve() in seen:
        raise ConfigError(f"{path}: 'base' chain loops back to itself")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config ({e.strerror})") from e
    try:
        data = yaml.safe_load(text)
        lines = _key_lines(yaml.compose(text))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: invalid YAML ({getattr(e, 'problem', e)})") from e
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1: a config must be a mapping of keys to values")
    base = data.pop("base", None)
    layers: list[tuple[dict[str, Any], str, dict[str, int]]] = []
    if base is not None:
        if not isinstance(base, str):
            raise ConfigError(f"{path}:{lines.get('base', 1)}: base: must be a config name or path")
        layers = _file_layers(resolve_config(base, relative_to=path.parent), seen + (path.resolve(),))
        # The file's own name wins over the base's: a fault config is its own run.
    layers.append((data, str(path), lines))
    return layers


def _key_lines(node: Any, prefix: str = "", out: dict[str, int] | None = None) -> dict[str, int]:
    """Map dotted key paths to 1-based line numbers, for error messages."""
    if out is None:
        out = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = f"{prefix}{k.value}"
            out[key] = k.start_mark.line + 1
            _key_lines(v, key + ".", out)
    return out


def _merge(into: dict[str, Any], data: Mapping[str, Any], src: str, lines: Mapping[str, int],
           prefix: str) -> None:
    for k, v in data.items():
        key = f"{prefix}{k}"
        where = f"{src}:{lines.get(key, 1)}"
        if not isinstance(k, str) or k not in into:
            raise ConfigError(f"{where}: unknown key {key!r}{_known_hint(into)}")
        default = into[k]
        if isinstance(default, dict):
            if not isinstance(v, dict):
                raise ConfigError(f"{where}: {key} must be a mapping of keys to values")
            _merge(default, v, src, lines, key + ".")
        else:
            into[k] = _coerce(v, default, key, where)


def _parse_set(s: str) -> tuple[str, str]:
    key, sep, value = s.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {s!r}: expected KEY=VALUE, e.g. --set train.lr=3e-4")
    return key, value


def _apply_set(into: dict[str, Any], key: str, raw: str) -> None:
    node = into
    parts = key.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            known = _known_hint(node) if isinstance(node, dict) else ""
            raise ConfigError(f"--set {key}: unknown key {'.'.join(parts[: i + 1])!r}{known}")
        if i == len(parts) - 1:
            default = node[part]
            if isinstance(default, dict):
                raise ConfigError(f"--set {key}: is a section; set one of its keys, e.g. {key}.X=V")
            node[part] = _coerce(_parse_value(raw, default), default, key, f"--set {key}")
        else:
            node = node[part]


def _parse_value(raw: str, default: Any) -> Any:
    if isinstance(default, str):
        return raw  # a string key takes the text as written ("on", "null" stay strings)
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def _coerce(v: Any, default: Any, key: str, where: str) -> Any:
    """``v`` converted to the type of ``default``, or a ConfigError naming the key."""
    want = type(default)
    if want is bool:
        if isinstance(v, bool):
            return v
    elif want is int:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        if isinstance(v, str):
            try:
                return int(v.replace("_", ""))
            except ValueError:
                pass
        if isinstance(v, float) and v.is_integer():
            return int(v)
    elif want is float:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        if isinstance(v, str):  # YAML 1.1 reads "3e-4" (no dot) as a string
            try:
                return float(v)
            except ValueError:
                pass
    elif want is str:
        if isinstance(v, str):
            return v
    elif want is list and isinstance(v, list):
        if default:
            return [_coerce(x, default[0], f"{key}[{i}]", where) for i, x in enumerate(v)]
        return v
    raise ConfigError(f"{where}: {key} must be {want.__name__} (like {default!r}), got {v!r}")


def _known_hint(node: Mapping[str, Any]) -> str:
    keys = sorted(node)
    return f" (known: {', '.join(keys)})" if keys else ""


def _build(d: dict[str, Any]) -> Config:
    model_cls, data_cls = TASK_SECTIONS[d["task"]]
    kw: dict[str, Any] = {}
    for k, v in d.items():
        if k == "model":
            kw[k] = model_cls(**v)
        elif k == "data":
            kw[k] = data_cls(**v)
        elif isinstance(v, dict):
            kw[k] = _SECTION_TYPES[k](**v)
        else:
            kw[k] = v
    return Config(**kw)


_SECTION_TYPES: Mapping[str, type] = {
    "train": TrainCfg, "eval": EvalCfg, "checkpoint": CheckpointCfg, "log": LogCfg,
    "fault": FaultCfg, "dist": DistCfg,
}


def _validate(cfg: Config) -> None:
    d = cfg.to_dict()
    for key, choices in _CHOICES.items():
        node: Any = d
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None and node not in choices:
            raise ConfigError(f"{key}: {node!r} is not one of {', '.join(choices)}")
    positive = {
        "train.steps": cfg.train.steps, "train.batch_size": cfg.train.batch_size,
        "checkpoint.keep": cfg.checkpoint.keep, "log.memory_every": cfg.log.memory_every,
        "log.graph_every": cfg.log.graph_every,
    }
    for key, v in positive.items():
        if v <= 0:
            raise ConfigError(f"{key}: must be > 0, got {v}")
    if cfg.dist.nproc < 1:
        raise ConfigError(f"dist.nproc: must be >= 1, got {cfg.dist.nproc}")
    for key, v in {"train.lr": cfg.train.lr, "eval.every": cfg.eval.every,
                   "checkpoint.every": cfg.checkpoint.every, "fault.step": cfg.fault.step,
                   "fault.seconds": cfg.fault.seconds, "threads": cfg.threads}.items():
        if v < 0:
            raise ConfigError(f"{key}: must be >= 0, got {v}")
