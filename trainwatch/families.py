"""Every series of a run classified by family, from its name alone: train loss, val loss, lr...

Roles (:mod:`trainwatch.roles`) name *one* series per job by exact name; families put *every*
series somewhere, so that rules can watch all the val losses of a run (``eval_g0_loss`` ..
``eval_g5_loss``), every loss component (``loss_cls``, ``loss_bbox``) and every learning rate
(``lr-AdamW/pg1``). An exact role still wins: ``norm`` is llm.c's grad norm and ``tel`` its val
loss because the role table says so, and a user's ``roles:`` aliases count the same way.

A name is read in three steps. The **split** is a word that is a whole ``/`` part (``val/loss``,
``Loss/validation``), a prefix (``eval_loss``, ``valLoss``) or a suffix (``loss_val``):
train/training, val/valid/validation/dev, eval/evaluation, test/testing. A **set** is the data
set of a split when a run evaluates several: HF's ``eval_<set>_loss`` and Lightning's
``/dataloader_idx_<n>``. What is left is the **base** (``loss``, ``fast_rcnn/cls_accuracy``),
less Lightning's ``_step``/``_epoch`` and Keras' ``epoch_``/``batch_`` reductions, and its words
give the family. Words that say time, throughput, lr or scale are looked at before ``loss``, so
``loss_scale`` or ``eval_runtime`` is never taken for a loss.

:meth:`FamilyTable.classify_run` classifies a run's names together: it finds HF's set names from
the columns HF writes with every set (``eval_<set>_runtime``) and pairs every val series with
the train series it is compared with (``eval_g3_loss`` -> ``loss``, ``val/acc`` -> ``train/acc``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from trainwatch.roles import DEFAULT_ROLES, RoleTable, higher_is_better

FAMILIES = ("train_loss", "val_loss", "train_metric", "val_metric", "lr", "grad_norm",
            "throughput", "step_time", "memory", "epoch", "system", "other")
"""Every family a series can be in (``other``: counters, ETAs, momentum, anything unknown)."""
SPLITS = ("train", "val", "eval", "test")

ROLE_FAMILY = {"loss": "train_loss", "val_loss": "val_loss", "lr": "lr", "grad_norm": "grad_norm",
               "throughput": "throughput", "step_time": "step_time", "memory": "memory",
               "epoch": "epoch"}
"""The family of a series that plays a role (the role wins over the words of its name)."""

_SPLIT_WORDS = {"train": "train", "training": "train", "val": "val", "valid": "val",
                "validation": "val", "dev": "val", "eval": "eval", "evaluation": "eval",
                "test": "test", "testing": "test"}
_SPLIT_ALT = "|".join(sorted(_SPLIT_WORDS, key=len, reverse=True))
_PREFIX = re.compile(rf"^({_SPLIT_ALT})(?:[_\-. ]+|(?=[A-Z]))(.+)$", re.IGNORECASE)
_SUFFIX = re.compile(rf"^(.+?)[_\-. ]+({_SPLIT_ALT})$", re.IGNORECASE)
_DATALOADER = re.compile(r"^dataloader_idx_\d+$", re.IGNORECASE)
_LIGHTNING_REDUCTION = re.compile(r"^(.+?)_(step|epoch)$", re.IGNORECASE)
_KERAS_REDUCTION = re.compile(r"^(epoch|batch)_(.+)$", re.IGNORECASE)
_KERAS_VS = re.compile(r"_vs_(iterations|epochs?|steps?)$", re.IGNORECASE)
_TOKEN_SPLIT = re.compile(r"[^0-9A-Za-z]+")
_CAMEL = re.compile(r"(?<=[a-z]{2})(?=[A-Z])")
# HF writes these with every evaluation of every set: ``eval_<set>_runtime`` names a set
_HF_SET_COMPANION = re.compile(r"^(.+?)_(runtime|samples_per_second|steps_per_second)$")
# ``eval_<x>_loss`` is HF's loss of set <x>, unless <x> is a loss component
_COMPONENTS = {"total", "box", "bbox", "cls", "obj", "dfl", "giou", "iou", "mask", "rpn", "ce",
               "kl", "nll", "mse", "mae", "l1", "l2", "aux", "recon", "reg", "lm", "mlm", "seg",
               "ctc", "vq", "commit", "disc", "gen", "adv", "dice", "focal", "centerness"}

_SCALE_WORDS = {"scale", "scaler", "scaling", "weight", "weights", "coef", "coeff", "lambda",
                "factor", "mult"}
_MOMENTUM = {"momentum", "mom", "beta", "beta1", "beta2", "betas", "wd", "decay"}
_TIME_UNITS = {"s", "sec", "secs", "second", "seconds", "ms", "min", "minute", "hour", "h"}
_THROUGHPUT = {"throughput", "tps", "mfu", "qps", "ips", "fps", "itps"}
_TIME = {"time", "times", "ms", "runtime", "duration", "sec", "secs", "seconds", "latency",
         "elapsed", "dt"}
_MEMORY = {"memory", "mem", "vram", "rss", "allocated", "reserved", "mib", "gib"}
_SYSTEM = {"gpu", "cpu", "util", "utilization", "temp", "temperature", "power", "watts", "fan",
           "disk", "network", "net", "proc"}
_SYSTEM_GROUPS = {"system", "sys", "sysmon", "hardware"}
_COUNTERS = {"iter", "iters", "iteration", "iterations", "step", "steps", "global", "samples",
             "tokens", "num", "n", "count", "flos", "consumed", "seen", "eta", "timestamp",
             "batch", "idx", "index"}
_METRIC = re.compile(
    r"^(acc\w*|accuracy|top\d+|top|m?ap(\d+|[sml])?|bbox|segm|f1|auc|auroc|roc|precision|"
    r"recall|m?iou|io|dice|bleu|sacrebleu|rouge\w*|meteor|cider|psnr|ssim|r2|reward|exact|em|"
    r"wer|cer|err|ppl|perplexity|bpb|bpc|mse|mae|rmse|mape|fid|false|true|fpr|fnr|tpr|"
    r"specificity|sensitivity|matthews|pearson|spearmanr|correlation|score|hellaswag)$")
"""Words of quality metrics (read with the base's other words: ``bbox`` alone is no metric)."""
_EVAL_ONLY = re.compile(r"^(m?ap(\d+|[sml])?|bleu|sacrebleu|rouge\w*|meteor|cider|fid)$")
"""Metrics only ever computed by an evaluation: a val metric even without a split word."""


@dataclass(frozen=True)
class SeriesFamily:
    """What a series is, read from its name."""

    name: str
    family: str
    """One of :data:`FAMILIES`."""
    split: str
    """``train``, ``val``, ``eval`` or ``test`` (``train`` when the name says none)."""
    set: str | None
    """The data set of a split that has several (``g3`` of ``eval_g3_loss``), else None."""
    base: str
    """The name without its split, set and reduction: ``loss`` for ``val/loss``."""
    reduction: str | None
    """``step`` or ``epoch``: Lightning's ``_step``/``_epoch``, Keras' ``epoch_``/``batch_``."""
    higher_is_better: bool
    role: str | None = None
    """The exact role the name plays in the role table, if any."""
    pair: str | None = None
    """For a series of a non-train split: the train series it is compared with (set by
    :meth:`FamilyTable.classify_run`)."""

    @property
    def is_loss(self) -> bool:
        return self.family in ("train_loss", "val_loss")


@dataclass(frozen=True)
class _Parts:
    split: str | None
    split_word: str | None
    set: str | None
    base: str
    reduction: str | None


def tokens(text: str) -> list[str]:
    """Lower-case words of a name: separators and camelCase (``memoryAllocated``) split it,
    one-letter prefixes do not (``mAP`` stays one word)."""
    out: list[str] = []
    for piece in _TOKEN_SPLIT.split(text):
        out.extend(w.lower() for w in _CAMEL.split(piece) if w)
    return out


def _family_of_words(parts: list[str], split: str | None) -> str:
    """The family a base's words say (before the split decides train vs val)."""
    words = [w for p in parts for w in tokens(p)]
    if not words:
        return "other"
    ws = set(words)
    if words in (["epoch"], ["epochs"]):
        return "epoch"
    has_loss = any("loss" in w for w in words) or bool(ws & {"nll", "xent"})
    if ws & _MOMENTUM or (has_loss and ws & _SCALE_WORDS) or "eta" in ws:
        return "other"
    per = [i for i, w in enumerate(words) if w == "per"]
    if ws & _THROUGHPUT or any(i + 1 < len(words) and words[i + 1] in _TIME_UNITS for i in per):
        return "throughput"
    if parts and parts[-1].lower() == "s" and len(parts) > 1:  # tok/s, samples/s
        return "throughput"
    if ws & _MEMORY:
        return "memory"
    if ws & _TIME:
        return "step_time"
    if any(re.fullmatch(r"lr\d*", w) for w in words) or {"learning", "rate"} <= ws:
        return "lr"
    if ("norm" in ws or "norms" in ws or "l2" in ws) and ws & {"grad", "grads", "gradient"} \
            or ws & {"gnorm", "gradnorm"}:
        return "grad_norm"
    if has_loss or "cross" in ws and "entropy" in ws:
        return "val_loss" if split not in (None, "train") else "train_loss"
    metric = [w for w in words if _METRIC.match(w)]
    if metric and not ("bbox" in ws and not [w for w in metric if w != "bbox"]):
        if split not in (None, "train") or any(_EVAL_ONLY.match(w) for w in words):
            return "val_metric"
        return "train_metric"
    if parts[0].lower() in _SYSTEM_GROUPS or ws & _SYSTEM:
        return "system"
    if ws & _COUNTERS:
        return "other"
    return "val_metric" if split not in (None, "train") else "other"


def _strip_split(text: str) -> tuple[str, str | None, str | None]:
    """``text`` without a split prefix or suffix, the canonical split and the word found."""
    m = _PREFIX.match(text)
    if m:
        return m.group(2), _SPLIT_WORDS[m.group(1).lower()], m.group(1).lower()
    m = _SUFFIX.match(text)
    if m:
        return m.group(1), _SPLIT_WORDS[m.group(2).lower()], m.group(2).lower()
    return text, None, None


def parse_name(name: str) -> _Parts:
    """Split, set, base and reduction of a name (no role table, no other names)."""
    parts = [p for p in name.split("/") if p]
    split = word = set_ = None
    if name.lower() in _SPLIT_WORDS:  # llm.c's ``eval`` (its HellaSwag accuracy)
        return _Parts(_SPLIT_WORDS[name.lower()], name.lower(), None, name, None)
    if len(parts) > 1 and _DATALOADER.match(parts[-1]):
        set_ = parts.pop()
    rest = []
    for p in parts:
        w = p.lower()
        if w in _SPLIT_WORDS and split is None and len(parts) > 1:
            split, word = _SPLIT_WORDS[w], w
        else:
            rest.append(p)
    if rest:
        # the first part may carry a prefix (val_loss, and HF's train/train_loss twice over),
        # the last a suffix (loss_val)
        first, s, w = _strip_split(rest[0])
        if s is not None and (split is None or s == split):
            rest[0], split, word = first, s, w
        elif len(rest) > 1 or s is None:
            last, s, w = _strip_split(rest[-1])
            if s is not None and (split is None or s == split) and _PREFIX.match(rest[-1]) is None:
                rest[-1], split, word = last, s, w
    if not rest:
        return _Parts(split, word, set_, name, None)
    rest[-1] = _KERAS_VS.sub("", rest[-1]) or rest[-1]
    reduction = None
    m = _LIGHTNING_REDUCTION.match(rest[-1])
    k = _KERAS_REDUCTION.match(rest[0])
    if m and _reducible([*rest[:-1], m.group(1)], split):
        rest[-1], reduction = m.group(1), m.group(2).lower()
    elif k and _reducible([k.group(2), *rest[1:]], split):
        rest[0], reduction = k.group(2), "epoch" if k.group(1).lower() == "epoch" else "step"
    if set_ is None and word in ("eval", "evaluation", "test") and len(rest) == 1:
        m = re.match(r"^(.+)_loss$", rest[0])
        if m and not set(tokens(m.group(1))) & _COMPONENTS:
            set_, rest[0] = m.group(1), "loss"
    return _Parts(split, word, set_, "/".join(rest), reduction)


def _reducible(parts: list[str], split: str | None) -> bool:
    """A ``_step``/``_epoch`` is a reduction only on what is a metric without it
    (``global_step`` and ``time_per_step`` keep theirs)."""
    return _family_of_words(parts, split) in (
        "train_loss", "val_loss", "train_metric", "val_metric", "lr", "grad_norm")


@dataclass(frozen=True)
class FamilyTable:
    """Classifies names by family on top of a role table (exact roles win)."""

    roles: RoleTable = DEFAULT_ROLES
    _memo: dict = field(default_factory=dict, compare=False, repr=False)
    _runs: dict = field(default_factory=dict, compare=False, repr=False)

    def classify(self, name: str) -> SeriesFamily:
        """The family of one name, read alone (no set names, no pair)."""
        got = self._memo.get(name)
        if got is None:
            got = self._classify(name)
            if len(self._memo) >= 4096:
                self._memo.clear()
            self._memo[name] = got
        return got

    def _classify(self, name: str) -> SeriesFamily:
        p = parse_name(name)
        split = p.split or "train"
        role = self.roles.role_of(name)
        base = p.base
        if role is not None:
            family = ROLE_FAMILY[role]
            if family in ("train_loss", "val_loss") and not any("loss" in w for w in tokens(base)):
                base = "loss"  # trl, tel: the role says what the name does not
            if family == "val_loss" and split == "train":
                split = "val"
            elif family == "train_loss":
                split = "train"
        else:
            family = _family_of_words(base.split("/"), p.split)
            if family == "val_metric" and p.split is None:
                split = "val"  # mAP, coco/bbox_mAP: evaluation results with no split word
        better = family == "throughput" or higher_is_better(name)
        return SeriesFamily(name, family, split, p.set, base, p.reduction, better, role)

    def classify_run(self, names: Iterable[str],
                     points: Mapping[str, int] | None = None) -> dict[str, SeriesFamily]:
        """Every name of a run classified, with HF's set names found and each non-train
        series paired. ``points`` (points per series, when known) keeps a one-point summary
        (HF's final ``train_loss``) from being a pair."""
        names = list(dict.fromkeys(names))
        key = frozenset(names)
        if points is None and key in self._runs:
            return dict(self._runs[key])
        fams = {n: self.classify(n) for n in names}
        _sets_from_companions(fams)
        main_loss = self.roles.resolve(names).get("loss")
        out = {n: replace(f, pair=_pair(f, fams, main_loss, points)) if f.split != "train" else f
               for n, f in fams.items()}
        if points is None:
            if len(self._runs) >= 256:
                self._runs.clear()
            self._runs[key] = out
        return dict(out)


def _sets_from_companions(fams: dict[str, SeriesFamily]) -> None:
    """``eval_g0_runtime`` says ``g0`` is a set: ``eval_g0_accuracy`` is then set ``g0``'s
    ``accuracy`` (in place)."""
    sets: dict[str, set[str]] = {}
    for f in fams.values():
        m = _HF_SET_COMPANION.match(f.base)
        if f.split != "train" and f.set is None and m:
            sets.setdefault(f.split, set()).add(m.group(1))
    if not sets:
        return
    for n, f in fams.items():
        for s in sorted(sets.get(f.split, ()), key=len, reverse=True):
            if f.set is None and f.base.startswith(s + "_") and len(f.base) > len(s) + 1:
                fams[n] = replace(f, set=s, base=f.base[len(s) + 1:])
                break


def _pair(f: SeriesFamily, fams: Mapping[str, SeriesFamily], main_loss: str | None,
          points: Mapping[str, int] | None) -> str | None:
    """The train series a val series is compared with: the train series of the same base
    (same reduction first), the bare base, and for the loss the run's loss role."""

    def usable(n: str | None) -> bool:
        return n is not None and n in fams and (points is None or points.get(n, 0) >= 2)

    base = f.base.lower()
    train = [g for g in fams.values()
             if g.split == "train" and g.base.lower() == base and g.family != "val_metric"]
    explicit = sorted((g for g in train if parse_name(g.name).split == "train"),
                      key=lambda g: (g.reduction != f.reduction, len(g.name), g.name))
    bare = sorted((g for g in train if g.name.lower() == base), key=lambda g: g.name)
    order: list[str | None] = []
    if f.reduction is not None:
        order += [g.name for g in explicit if g.reduction == f.reduction]
    if f.family == "val_loss" and base == "loss":
        order.append(main_loss)
    order += [g.name for g in explicit] + [g.name for g in bare]
    return next((n for n in order if usable(n) and n != f.name), None)


DEFAULT_FAMILIES = FamilyTable()


def classify(name: str, roles: RoleTable = DEFAULT_ROLES) -> SeriesFamily:
    """The family of one name (with the default role table unless ``roles`` is given)."""
    table = DEFAULT_FAMILIES if roles is DEFAULT_ROLES else FamilyTable(roles)
    return table.classify(name)


def classify_run(names: Iterable[str], roles: RoleTable = DEFAULT_ROLES,
                 points: Mapping[str, int] | None = None) -> dict[str, SeriesFamily]:
    """Every name of a run by family, sets found and val series paired
    (see :meth:`FamilyTable.classify_run`)."""
    table = DEFAULT_FAMILIES if roles is DEFAULT_ROLES else FamilyTable(roles)
    return table.classify_run(names, points)
