"""An honest-but-curious server's attacks on one user's upload of one round (plain NumPy).

The server holds the global rows ``G`` it sent the user and the rows ``U`` the user sent
back (its tuned rows, decoys, noise) for the uploaded items; it guesses which of them are
the user's positives. Every attack returns a score per item (higher = more likely a
positive); :func:`auc` and :func:`top_f1` turn scores into ROC-AUC and F1.

- ``norm``: ``||U_i - G_i||``, oriented by a shadow run (does a positive move more than a
  negative when the server trains a copy itself?);
- ``direction``: the projection of ``U_i - G_i`` on the first singular vector of the
  user's changes (a positive moves along the user's score direction, a negative against
  it), the sign chosen so that the positive side is the smaller one (positives are
  outnumbered by negatives);
- ``imia``: Yuan et al., WWW 2023 (the rule of their public code, reimplemented): guess
  labels, train a shadow copy from ``G`` with them, confirm the guesses of the items whose
  shadow rows land closest to ``U``, guess again for the rest, until enough positives are
  confirmed; the score is the final 0/1 label (so its AUC is the balanced accuracy);
- ``request``: from the rows the user requests in two consecutive rounds: an item asked
  for again in the next round scores 1 (a positive is trained every round, a negative is
  drawn afresh).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Shadow:
    """How the server imitates a user's local update (it knows the method and its rates,
    not the user's private parameters). ``kind``: ``alternate`` (PFedRec: the score
    function steps, then the rows with it) or ``joint`` (FedMF: both from one gradient);
    ``weight``/``bias``: the shadow's private score function (PFedRec: the public shared
    initialisation; FedMF: a random user vector)."""

    kind: str
    weight: np.ndarray
    bias: float
    lr_rows: float
    lr_private: float
    batch_size: int
    train_bias: bool = True

    def train(self, rows: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Rows after one local epoch over (each item once, its guessed label)."""
        rows = np.array(rows, dtype=np.float64)
        w, b = self.weight.astype(np.float64).copy(), float(self.bias)
        order = rng.permutation(len(rows))
        for lo in range(0, len(order), self.batch_size):
            idx = order[lo : lo + self.batch_size]
            x, y = rows[idx], labels[idx]
            grad = (_sigmoid(x @ w + b) - y) / len(idx)
            if self.kind == "alternate":
                w -= self.lr_private * grad @ x
                b -= self.lr_private * grad.sum() if self.train_bias else 0.0
                grad = (_sigmoid(x @ w + b) - y) / len(idx)
                rows[idx] -= self.lr_rows * grad[:, None] * w[None]
            else:
                w_old = w.copy()
                w -= self.lr_private * grad @ x
                rows[idx] -= self.lr_rows * grad[:, None] * w_old[None]
        return rows


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """ROC-AUC of ``scores`` for the boolean labels ``positive`` (ties count one half);
    NaN when one class is empty."""
    positive = np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]  # 1-based, ties averaged
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def top_f1(scores: np.ndarray, positive: np.ndarray, count: int, rng: np.random.Generator) -> float:
    """F1 of guessing the ``count`` best-scored items as the positives (ties broken at
    random)."""
    positive = np.asarray(positive, dtype=bool)
    if count <= 0 or not positive.any():
        return float("nan")
    order = np.lexsort((rng.random(len(scores)), -np.asarray(scores, dtype=np.float64)))
    hits = int(positive[order[:count]].sum())
    precision, recall = hits / count, hits / int(positive.sum())
    return 0.0 if hits == 0 else 2 * precision * recall / (precision + recall)


def random_f1(num_items: int, num_positive: int, count: int) -> float:
    """Expected-value F1 of guessing ``count`` of ``num_items`` at random (precision = the
    positive share, recall = ``count / num_items``)."""
    precision, recall = num_positive / num_items, count / num_items
    return 2 * precision * recall / (precision + recall)


def norm_scores(
    sent: np.ndarray, uploaded: np.ndarray, shadow: Shadow, prior: float, rng: np.random.Generator
) -> np.ndarray:
    """``||U_i - G_i||``, negated when a shadow run with random labels (share ``prior``
    positive) moves its guessed positives less than its guessed negatives."""
    norms = np.linalg.norm(uploaded.astype(np.float64) - sent, axis=1)
    labels = (rng.random(len(sent)) < prior).astype(np.float64)
    moved = np.linalg.norm(shadow.train(sent, labels, rng) - sent, axis=1)
    if labels.all() or not labels.any():
        return norms
    return norms if moved[labels == 1].mean() >= moved[labels == 0].mean() else -norms


def direction_scores(sent: np.ndarray, uploaded: np.ndarray) -> np.ndarray:
    """Projection of the changes on their first singular vector, oriented so that the
    positive side holds fewer items."""
    changes = uploaded.astype(np.float64) - sent
    if not np.any(changes):
        return np.zeros(len(changes))
    _, _, vt = np.linalg.svd(changes, full_matrices=False)
    projection = changes @ vt[0]
    return projection if (projection > 0).sum() <= (projection < 0).sum() else -projection


def imia_scores(
    sent: np.ndarray,
    uploaded: np.ndarray,
    shadow: Shadow,
    expected: int,
    rng: np.random.Generator,
    confirm_share: float = 0.3,
    max_iterations: int = 30,
) -> np.ndarray:
    """IMIA's labels (1 = guessed positive). Each iteration trains the shadow with the
    current guess (``expected`` positives), confirms the guesses of the unconfirmed items
    whose shadow rows are closest to the upload (``confirm_share`` of the unconfirmed ones:
    the public code confirms up to 0.9 of all items at once, which here confirms many wrong
    guesses), and
    guesses again for the rest: confirmed positives first, the remainder at random."""
    k = len(sent)
    confirmed = np.full(k, -1)
    guess = np.zeros(k)
    guess[rng.choice(k, size=min(expected, k), replace=False)] = 1.0
    for _ in range(max_iterations):
        distance = np.linalg.norm(shadow.train(sent, guess, rng) - uploaded, axis=1)
        open_items = [i for i in np.argsort(distance, kind="stable") if confirmed[i] < 0]
        for i in open_items[: max(1, int(confirm_share * len(open_items)))]:
            confirmed[i] = int(guess[i])
        unknown = np.flatnonzero(confirmed < 0)
        found = int((confirmed == 1).sum())
        if found >= expected or len(unknown) == 0:
            break
        guess = (confirmed == 1).astype(np.float64)
        picks = rng.choice(unknown, size=min(expected - found, len(unknown)), replace=False)
        guess[picks] = 1.0
    return np.where(confirmed < 0, guess, confirmed).astype(np.float64)


def request_scores(items: np.ndarray, next_request: np.ndarray) -> np.ndarray:
    """1 for the items asked for again in the next round's request, else 0."""
    return np.isin(items, next_request).astype(np.float64)
