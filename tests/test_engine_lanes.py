"""Lanes: the loss rules on every train and val loss a run logs, each cause told once, the same
alerts however the stream is read."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from trainwatch.families import DEFAULT_FAMILIES
from trainwatch.formats.jsonl import JsonlParser
from trainwatch.rules import Alert, RuleEngine, load_rules_config
from trainwatch.rules.engine.lanes import lane_specs

CFG = load_rules_config()


def _lines(records: list[dict]) -> list[bytes]:
    return [(json.dumps(r) + "\n").encode() for r in records]


def _read_in(lines: list[bytes], k: int) -> list[Alert]:
    """The alerts of ``lines`` fed in reads of ``k`` lines (live below a whole read)."""
    p = JsonlParser("metrics.jsonl", clock=lambda: 0.0)
    e = RuleEngine(CFG, live=k < len(lines))
    for i in range(0, len(lines), k):
        e.feed(p.parse(b"".join(lines[i:i + k]), i + 1))
    e.finish(now=1e9)
    return e.alerts


def _all_reads_agree(lines: list[bytes]) -> list[Alert]:
    whole = _read_in(lines, len(lines))
    for k in (1, 7):
        assert _read_in(lines, k) == whole, k
    return whole


def _eval_sets_run() -> list[dict]:
    """HF Trainer's shape: a train loss every 100 steps falling to a tenth, six eval sets
    (``eval_g<k>_loss`` with their runtime) every 400 steps from step 0, each at its best at
    step 400 and then rising to twice that while the train loss keeps falling."""
    rng = np.random.default_rng(3)
    out: list[dict] = []
    for step in range(0, 6001, 100):
        if step:
            out.append({"step": step, "loss": 1.0 * (step / 100) ** -0.6
                        * (1 + 0.01 * rng.standard_normal()), "learning_rate": 1e-5})
        if step % 400 == 0:
            for k in range(6):
                level = 1.5 + 0.2 * k
                v = 3 * level if step == 0 else level * (1 + 0.9 * (step - 400) / 5600)
                out.append({"step": step, f"eval_g{k}_loss": v * (1 + 0.005 * rng.standard_normal()),
                            f"eval_g{k}_runtime": 5.0})
    return out


def test_eval_sets_that_overfit_together_are_one_alert_naming_them() -> None:
    alerts = _all_reads_agree(_lines(_eval_sets_run()))
    over = [a for a in alerts if a.rule == "overfit"]
    assert len(over) == 1, [(a.metric, a.step) for a in over]
    a = over[0]
    assert a.metric == "eval_g0_loss"
    assert a.evidence["also"] == [f"eval_g{k}_loss" for k in range(1, 6)]
    assert a.message.startswith("eval_g0_loss has been above its best")
    assert "The same in eval_g1_loss, eval_g2_loss" in a.message
    assert a.evidence["best_step"] == 400
    # the plateau rule does not call an overfitting val loss "not improving" as well
    assert [x for x in alerts if x.severity != "info" and x.rule != "overfit"] == []


def test_an_early_best_against_a_train_loss_logged_once_per_evaluation() -> None:
    """The best evaluation comes before any train block of ``train_window`` points: the train
    level is the median of the train points so far."""
    rng = np.random.default_rng(5)
    recs = []
    for epoch in range(1, 17):
        val = 0.18 if epoch == 6 else 0.2 + 0.05 * abs(epoch - 6) ** 1.2
        recs.append({"step": epoch, "loss": 0.5 / epoch * (1 + 0.01 * rng.standard_normal()),
                     "valid_loss": val})
    alerts = _all_reads_agree(_lines(recs))
    over = [a for a in alerts if a.rule == "overfit"]
    assert [(a.metric, a.evidence["best_step"]) for a in over] == [("valid_loss", 6)]


def _gan(nan_from: int | None = None) -> list[dict]:
    rng = np.random.default_rng(7)
    out = []
    for step in range(1, 801):
        disc = 0.7 * (1 + 0.05 * rng.standard_normal())
        gen = 2.0 * (1 + 0.05 * rng.standard_normal())
        if step == 500:
            disc, gen = disc * 8, gen * 8
        if nan_from is not None and step >= nan_from:
            disc = math.nan
        out.append({"step": step, "train_disc_loss": disc, "train_gen_loss": gen})
    return out


def test_two_losses_spiking_at_one_record_are_one_spike() -> None:
    alerts = _all_reads_agree(_lines(_gan()))
    spikes = [a for a in alerts if a.rule == "loss_spike"]
    assert [(a.metric, a.step, a.evidence.get("also")) for a in spikes] == [
        ("train_disc_loss", 500, ["train_gen_loss"])]


def test_a_nan_in_any_loss_is_an_error() -> None:
    alerts = _all_reads_agree(_lines(_gan(nan_from=600)))
    nans = [a for a in alerts if a.rule == "nan_inf"]
    assert [(a.metric, a.step, a.severity) for a in nans] == [("train_disc_loss", 600, "error")]
    assert "train_disc_loss is NaN" in nans[0].message


def test_a_loss_component_spike_is_told_with_the_total() -> None:
    rng = np.random.default_rng(11)
    recs = []
    for step in range(1, 601):
        cls = 0.4 * (1 + 0.03 * rng.standard_normal()) * (6.0 if step == 450 else 1.0)
        box = 0.3 * (1 + 0.03 * rng.standard_normal())
        recs.append({"step": step, "loss": cls + box, "loss_cls": cls, "loss_bbox": box})
    alerts = _all_reads_agree(_lines(recs))
    spikes = [(a.metric, a.step, a.evidence.get("also")) for a in alerts if a.rule == "loss_spike"]
    # the total spikes with its component at the same record: one spike, naming the component
    assert spikes == [("loss", 450, ["loss_cls"])]


@pytest.mark.parametrize(("names", "lanes"), [
    # another reduction of the main series is the same quantity: no lane
    (["train_loss_step", "train_loss_epoch", "val_loss"], {}),
    (["loss", "train_loss", "eval_loss"], {}),
    # a GAN's two losses, no main loss: both are lanes of the loss rules
    (["train_disc_loss", "train_gen_loss"], {"train_disc_loss": "loss", "train_gen_loss": "loss"}),
    # eval sets pair with the run's loss
    (["loss", "eval_a_loss", "eval_a_runtime", "eval_b_loss", "eval_b_runtime"],
     {"eval_a_loss": "val_loss", "eval_b_loss": "val_loss"}),
])
def test_lane_members(names: list[str], lanes: dict[str, str]) -> None:
    roles = CFG.roles.resolve(names)
    specs = lane_specs(names, roles, DEFAULT_FAMILIES, ("loss", "val_loss"))
    assert {m: s.role for m, s in specs.items()} == lanes
    for m, spec in specs.items():
        got = spec.roles(roles)
        assert got[spec.role] == m
        if spec.role == "val_loss":
            assert got["loss"] == roles["loss"]
