"""The server-side attacks of the privacy audit, on uploads built by hand."""

from __future__ import annotations

import numpy as np
import pytest

from fedrec_lab.audit import adaptive, attacks


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


def test_the_unchanged_popularity_and_consistency_rules_read_what_they_should():
    sent = np.arange(8.0).reshape(4, 2)
    uploaded = sent.copy()
    uploaded[[0, 2]] += 0.5  # two trained rows; rows 1 and 3 come back exactly as sent
    np.testing.assert_array_equal(adaptive.unchanged_scores(sent, uploaded), [1, 0, 1, 0])
    counts = np.array([0, 7, 2, 9, 1])
    np.testing.assert_array_equal(
        adaptive.popularity_scores(np.array([3, 1, 4]), counts), [9, 7, 1]
    )
    items = np.array([2, 4, 6])
    others = [np.array([2, 4]), np.array([2, 9]), np.array([2, 4, 6, 8])]
    np.testing.assert_allclose(adaptive.consistency_scores(items, others), [1, 2 / 3, 1 / 3])
    assert not adaptive.consistency_scores(items, []).any()


def test_pubpara_finds_the_side_the_uploaded_rows_moved_to_unless_noise_drowns_it():
    rng = np.random.default_rng(3)
    sent, uploaded, positive = _upload(rng)
    assert attacks.auc(adaptive.pubpara_scores(sent, uploaded, 40), positive) > 0.95
    drowned = [
        attacks.auc(adaptive.pubpara_scores(*_upload(rng, noise=200.0)[:2], 40), positive)
        for _ in range(20)
    ]
    assert abs(np.mean(drowned) - 0.5) < 0.06


def test_the_multi_round_attacker_gains_from_accumulating_noisy_rounds():
    rng = np.random.default_rng(4)
    items = np.arange(200)
    positive = items < 40

    def one_round():
        sent = rng.normal(size=(200, 8))
        step = np.where(positive, 0.3, -0.3)[:, None] * np.ones(8) / np.sqrt(8)
        return items, sent + step + rng.normal(0, 1.0, size=sent.shape), sent

    single = np.mean(
        [attacks.auc(adaptive.multiround_scores(items, [one_round()]), positive) for _ in range(5)]
    )
    many = adaptive.multiround_scores(items, [one_round() for _ in range(30)])
    assert single < 0.85 and attacks.auc(many, positive) > 0.97


def _shadowed_round(decoy_label):
    """A shadow-made upload: 20 positives, 80 negatives, 100 decoys labelled ``decoy_label``
    (None: sent back unchanged)."""
    rng = np.random.default_rng(5)
    shadow = attacks.Shadow("alternate", rng.normal(0, 0.3, size=16), 0.0, 50.0, 0.1, 64)
    sent = rng.normal(size=(200, 16))
    role = np.r_[np.zeros(20), np.ones(80), np.full(100, 2)]
    labels = (role == 0).astype(float)
    if decoy_label is not None:
        labels[role == 2] = decoy_label
    uploaded = shadow.train(sent, labels, rng)
    if decoy_label is None:
        uploaded[role == 2] = sent[role == 2]
    return sent, uploaded, role == 0, shadow


def test_the_distribution_attacker_sees_through_unchanged_decoys_not_positive_ones():
    sent, uploaded, positive, shadow = _shadowed_round(None)
    rng = np.random.default_rng(6)
    scores = adaptive.distribution_scores(sent, uploaded, shadow, (20, 80, 100), None, rng)
    assert attacks.auc(scores, positive) > 0.9
    sent, uploaded, positive, shadow = _shadowed_round(1.0)
    scores = adaptive.distribution_scores(sent, uploaded, shadow, (20, 80, 100), 1.0, rng)
    # positives hide among 100 decoys trained as positives: (80 + 100 / 2) / 180 = 0.72 at best
    assert attacks.auc(scores, positive) < 0.8
