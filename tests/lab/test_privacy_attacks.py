"""The server-side attacks of the privacy audit, on uploads built by hand."""

from __future__ import annotations

import numpy as np
import pytest

from fedrec_lab.audit import attacks


def test_auc_counts_the_ordered_pairs_and_half_the_ties():
    # pairs (pos, neg): (0.35 > 0.1), (0.35 < 0.4), (0.8 > 0.1), (0.8 > 0.4): 3 of 4
    assert attacks.auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == 0.75
    assert attacks.auc(np.array([1.0, 1.0]), np.array([1, 0])) == 0.5
    assert np.isnan(attacks.auc(np.array([1.0, 2.0]), np.array([1, 1])))


def test_top_f1_and_the_random_guess():
    positive = np.array([1, 1, 0, 0, 0], dtype=bool)
    rng = np.random.default_rng(0)
    assert attacks.top_f1(np.array([5.0, 4, 3, 2, 1]), positive, 2, rng) == 1.0
    assert attacks.top_f1(np.array([5.0, 1, 3, 2, 4]), positive, 2, rng) == 0.5
    assert attacks.random_f1(5, 2, 2) == pytest.approx(0.4)  # P = R = 2/5


def _upload(rng, positives=40, negatives=160, noise=0.0, dim=16):
    """Rows moved along +w (positives) or -w (negatives), plus Gaussian noise."""
    sent = rng.normal(size=(positives + negatives, dim))
    w = rng.normal(size=dim)
    sign = np.r_[np.ones(positives), -np.ones(negatives)]
    moved = sent + sign[:, None] * rng.uniform(1, 2, size=(len(sign), 1)) * w
    return sent, moved + rng.normal(0, noise, size=sent.shape), sign > 0


def test_the_direction_rule_separates_positives_unless_noise_drowns_them():
    rng = np.random.default_rng(0)
    sent, uploaded, positive = _upload(rng)
    assert attacks.auc(attacks.direction_scores(sent, uploaded), positive) == 1.0
    drowned = [
        attacks.auc(attacks.direction_scores(*_upload(rng, noise=200.0)[:2]), positive)
        for _ in range(20)
    ]
    assert abs(np.mean(drowned) - 0.5) < 0.05


def test_imia_recovers_the_labels_of_an_upload_its_shadow_could_have_made():
    rng = np.random.default_rng(1)
    weight = rng.normal(0, 0.3, size=16)
    shadow = attacks.Shadow("alternate", weight, 0.0, 50.0, 0.1, 64)
    sent = rng.normal(size=(200, 16))
    positive = np.zeros(200, dtype=bool)
    positive[rng.choice(200, 40, replace=False)] = True
    uploaded = shadow.train(sent, positive.astype(float), np.random.default_rng(2))
    labels = attacks.imia_scores(sent, uploaded, shadow, 40, rng)
    assert attacks.auc(labels, positive) > 0.9
    random = attacks.imia_scores(sent, rng.normal(size=sent.shape) * 50, shadow, 40, rng)
    assert attacks.auc(random, positive) < 0.7


def test_the_request_rule_marks_the_items_asked_for_again():
    items = np.array([3, 5, 8, 13])
    np.testing.assert_array_equal(
        attacks.request_scores(items, np.array([5, 13, 21])), [0, 1, 0, 1]
    )
