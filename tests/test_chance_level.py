"""The chance-level detector: a cross-entropy flat at ln(number of classes), never below it, is a
uniform prediction; a loss that falls through ln k, or flat elsewhere, is not."""

from __future__ import annotations

import math

import numpy as np

from trainwatch.rules.detectors.chance import chance_level, classes_at


def test_classes_at_finds_k_within_the_tolerance() -> None:
    assert classes_at(0.6931, 5e-5) == (2, True)
    assert classes_at(2.3026, 5e-5) == (10, True)
    assert classes_at(10.3735, 5e-5) == (32000, False)  # several fit: the roundest
    assert classes_at(1.5, 0.01) is None
    assert classes_at(0.3, 0.01) is None


def test_a_loss_flat_at_ln_2_or_ln_10_is_at_chance() -> None:
    rng = np.random.default_rng(0)
    assert chance_level(np.full(50, 0.6931), 1e-4).classes == 2
    got = chance_level(math.log(10) * (1 + 0.01 * rng.standard_normal(300)))
    assert got is not None and got.classes == 10 and got.exact


def test_a_loss_that_passes_through_ln_2_is_not() -> None:
    assert chance_level(np.linspace(3.0, 0.1, 300)) is None
    assert chance_level(np.linspace(0.9, 0.6931, 300)) is None  # falling, not flat
    rng = np.random.default_rng(1)
    assert chance_level(1.5 * (1 + 0.01 * rng.standard_normal(300))) is None
