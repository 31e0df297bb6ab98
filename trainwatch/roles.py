"""Canonical metric roles and the names real frameworks use for them.

Matching is exact (after lower-casing), never by substring: ``loss_cls`` is not the loss. Users
extend the table in YAML (``roles:`` in a rules file) through :func:`RoleTable.extended`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

ROLES = ("loss", "val_loss", "lr", "grad_norm", "throughput", "step_time", "memory", "epoch")
SYSTEM_PREFIX = "system/"
"""Series a logger samples from the machine rather than the training loop logs (W&B's system
metrics: ``system/cpu``, ``system/gpu.0.gpu``...). They take no role; charts put them last."""

DEFAULT_ALIASES: Mapping[str, tuple[str, ...]] = {
    # (Lightning logs ``on_step`` and ``on_epoch`` as ``_step`` and ``_epoch`` series: the
    # per-step one first, or the loss would become one point per epoch once the first ends)
    "loss": ("loss", "train_loss", "train/loss", "total_loss", "trl", "train_loss_step",
             "train/loss_step", "train/loss_epoch", "train_loss_epoch", "train/total_loss"),
    "val_loss": ("val_loss", "eval_loss", "val/loss", "eval/loss", "valid_loss", "tel",
                 "validation_loss", "val_loss_epoch", "test_loss"),
    "lr": ("lr", "learning_rate", "train/learning_rate", "train/lr", "lr-0"),
    "grad_norm": ("grad_norm", "train/grad_norm", "gnorm", "norm", "grad_2.0_norm_total",
                  "grad-norm", "gradnorm", "total_norm"),
    # (HF Trainer logs ``train_tokens_per_second`` at each step with include_num_input_tokens_seen,
    # and ``train_samples_per_second`` once, in its closing row: tokens first, or that one row
    # would take the role at the end)
    "throughput": ("throughput", "tokens_per_sec", "tok/s", "samples_per_second",
                   "train_tokens_per_second", "train_samples_per_second", "tokens_per_second",
                   "samples/s", "tps", "train/throughput"),
    "step_time": ("step_time", "time_per_step", "iter_time", "data_time_per_step",
                  "train/step_time", "dt", "batch_time", "time_per_iter", "iter_time_ms",
                  "step_avg_ms", "ms_per_iter", "train_time_ms"),
    "memory": ("memory", "mem", "memory_allocated", "gpu_mem", "max_memory_allocated",
               "rss", "memory_mb", "train/memory", "mem_mib", "memory_mib", "mem_mb"),
    "epoch": ("epoch", "train/epoch"),
}

# Patterns for names that carry a varying part, e.g. Lightning's ``lr-AdamW``.
DEFAULT_PATTERNS: Mapping[str, tuple[str, ...]] = {
    "lr": (r"lr-[a-z0-9_]+", r"lr-[a-z0-9_]+/pg\d+"),
}

_HIGHER_IS_BETTER = re.compile(
    r"(^|[/_\-.])(acc|accuracy|top1|top5|map|ap|ap50|ap75|bbox_map|segm_map|f1|auc|auroc|"
    r"precision|recall|iou|miou|mean_io_u|dice|bleu|rouge\w*|psnr|ssim|r2|throughput|tokens_per_sec|"
    r"samples_per_second|tps|mfu|reward)($|[/_\-.]\w*$)",
    re.IGNORECASE,
)


_REMEMBERED = 256
"""Sets of names a table remembers the roles of (a run has a handful)."""


@dataclass(frozen=True)
class RoleTable:
    """Maps metric names to roles; exact names first, then anchored patterns."""

    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_ALIASES))
    patterns: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_PATTERNS))

    def __post_init__(self) -> None:
        exact: dict[str, str] = {}
        for role, names in self.aliases.items():
            for n in names:
                exact.setdefault(n.lower(), role)
        compiled = [
            (role, re.compile(p, re.IGNORECASE)) for role, ps in self.patterns.items() for p in ps
        ]
        object.__setattr__(self, "_exact", exact)
        object.__setattr__(self, "_compiled", compiled)
        # resolve()'s answers by set of names: every engine of a backfill of many runs, every
        # rank's batch, every redraw asks the same few questions (a resolution costs tens of
        # microseconds). Any thread: a lookup and a store are single dict operations.
        object.__setattr__(self, "_resolved", {})

    def role_of(self, name: str) -> str | None:
        r = self._exact.get(name.lower())  # type: ignore[attr-defined]
        if r is not None:
            return r
        for role, rx in self._compiled:  # type: ignore[attr-defined]
            if rx.fullmatch(name):
                return role
        return None

    def resolve(self, names: Iterable[str]) -> dict[str, str]:
        """role -> the metric name that plays it, picking the earliest alias when several match
        (then the name that sorts first: ``names`` may be a set, whose order varies between
        processes, and ``lr-AdamW`` vs ``lr-SGD`` must not). Remembered per set of names; each
        caller gets its own dict."""
        key = frozenset(names)
        memo: dict[frozenset[str], dict[str, str]] = self._resolved  # type: ignore[attr-defined]
        roles = memo.get(key)
        if roles is None:
            roles = self._resolve(key)
            if len(memo) >= _REMEMBERED:
                memo.clear()
            memo[key] = roles
        return dict(roles)

    def _resolve(self, names: Iterable[str]) -> dict[str, str]:
        found: dict[str, tuple[int, str]] = {}
        for n in names:
            role = self.role_of(n)
            if role is None:
                continue
            aliases = [a.lower() for a in self.aliases.get(role, ())]
            rank = aliases.index(n.lower()) if n.lower() in aliases else len(aliases)
            if role not in found or (rank, n) < found[role]:
                found[role] = (rank, n)
        return {role: n for role, (_r, n) in found.items()}

    def extended(self, extra: Mapping[str, Iterable[str]]) -> RoleTable:
        """A table with user aliases added in front of the defaults (they win ties)."""
        merged = {r: tuple(a) for r, a in self.aliases.items()}
        for role, names in extra.items():
            if role not in ROLES:
                raise ValueError(f"roles.{role}: unknown role (expected one of {', '.join(ROLES)})")
            merged[role] = tuple(names) + merged.get(role, ())
        return RoleTable(merged, self.patterns)


def higher_is_better(name: str) -> bool:
    """Accuracy-like metrics improve upwards; losses and everything else downwards."""
    base = name.rsplit("/", 1)[-1]
    if "loss" in base.lower() or "err" in base.lower() or "ppl" in base.lower():
        return False
    return bool(_HIGHER_IS_BETTER.search(name))


DEFAULT_ROLES = RoleTable()
