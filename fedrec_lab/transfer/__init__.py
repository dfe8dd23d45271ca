"""Settings that transfer: each method's presets scored on datasets they were not tuned on.

A *cell* is (method, candidate, target dataset). A candidate is a setting of a method's keys:
``<source>`` is the strict preset tuned on the source dataset (``conf/<method>-<source>-
strict.toml``) with its dataset keys replaced by the target's. Each cell is one run: the
strict protocol, seed ``--seed``, at most ``--rounds`` rounds, early stopping after
``--patience`` evaluated rounds without a better validation HR@10, the test HR@10 of the best
validation round. On each target the reference is the preset tuned on it (the candidate named
after the target); a target without a tuned preset (the generated dataset) takes the best
candidate measured on it, so its ratios are to the best measured, not to a tuned score.

``default``, per method, is chosen by leave-one-dataset-out: a candidate is scored by its
worst ratio (test HR@10 / reference) over the datasets it was not tuned on; the best worst
case wins. Intervals: 95 % user bootstrap (:mod:`fedrec_lab.stats`); the transferred-minus-
tuned differences are paired over the same users. ItemKNN (cosine, tuned on validation as
``python -m fedrec_lab.baselines`` does) is computed on the same split.

Each finished cell is cached as ``<cache>/cells/<cell>.json`` (its per-user test hits
included), so a stopped run resumes where it stopped::

    python bench/transfer.py --data-dir DIR --write bench/results/transfer

The cells and their runs (:mod:`.cells`), the choice (:mod:`.choice`), the report
(:mod:`.report`); ``bench/transfer.py`` is the command, ``bench/transfer_fewer_keys.py`` and
``bench/transfer_scaling.py`` studies that reuse them (:mod:`.fewer_keys`).
"""
