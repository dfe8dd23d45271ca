"""Runs FedRAP's reference code (mtics/FedRAP) in this process; started by
``bench/reference/fedrap.py``, never imported by the project.

``python -I fedrap_driver.py SETTINGS.json``, from a scratch folder that holds
``datasets/movielens/<data_file>`` (written by ``fedrap.py``). The reference's ``train.py``
runs unchanged (``runpy``) from ``<folder>/run`` (it reads ``../datasets`` and writes
``logs/`` and ``results/`` there), with ``--use_cuda ''`` (its ``type=bool`` flag is false
only for the empty string) and ``--seed`` (its own ``setSeed``). What this driver adds, all
outside the reference's files:

1. CPU: ``torch.cuda.set_device`` does nothing (``train.py`` calls it whatever ``use_cuda``
   says);
2. Python >= 3.11: ``random.sample`` of a ``set`` (``utils/data.py`` samples negatives from
   sets) samples ``tuple(set)``, what Python <= 3.10 did itself;
3. NumPy >= 2.4: ``np.in1d`` (removed) is ``np.isin`` (``utils/utils.py``'s user filter);
4. an empty ``coloredlogs`` module: ``initLogging`` calls ``coloredlogs.install()``, which only
   colours the console;
5. the evaluation negatives are this project's: 99 for test, through
   ``SampleGenerator._sample_negative`` (whose ``negative_items``, the training negatives'
   pool, stay the reference's: every item the user never interacted with), and 99 others
   for validation, through ``SampleGenerator.validate_data`` (the reference evaluates
   validation and test on the same 99 negatives);
6. each call of ``Engine.federatedEvaluate`` prints ``round R valid|test HR@10=… NDCG@10=…``
   (the reference logs four decimals only);
7. speed (``--fast-loader``): a user's train loader (``Engine.instanceUserTrainLoader``) draws
   the same random numbers as its ``DataLoader(shuffle=True)`` (per epoch the iterator's base
   seed, then the sampler's seed and ``randperm``) and yields the same batches by indexing the
   tensors, where ``DataLoader`` fetches and collates sample by sample (most of a round's
   time on the CPU);
8. an ablation (``--personal-init zero``): the personal item table every user starts from
   (``FedRAP.item_personality``, N(0, 1), one draw copied to every user) is set to zero after
   it is drawn, as this project's ``D_u`` starts (every other draw unchanged).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import types
from pathlib import Path


def main(settings_path: str) -> None:
    settings = json.loads(Path(settings_path).read_text())
    repo = settings["repo"]
    sys.path.insert(0, repo)

    import numpy as np
    import torch

    torch.set_num_threads(settings["threads"])
    torch.cuda.set_device = lambda *args, **kwargs: None
    if not hasattr(np, "in1d"):
        np.in1d = np.isin
    colours = types.ModuleType("coloredlogs")
    colours.install = lambda *args, **kwargs: None
    sys.modules["coloredlogs"] = colours

    import model.engine as reference_engine
    import utils.data as reference_data

    shims = runpy.run_path(str(Path(__file__).with_name("driver_shims.py")))
    reference_data.random = shims["SetSampling"]("random")
    test_negatives = np.load(settings["test_negatives"])
    valid_negatives = np.load(settings["valid_negatives"])

    def validate_data(self):
        """The reference's validation tensors, with our validation negatives."""
        rows = self.val_ratings.sort_values("userId")
        users = rows["userId"].to_numpy(copy=True)
        negatives = valid_negatives[users]
        return [
            torch.LongTensor(users),
            torch.LongTensor(rows["itemId"].to_numpy(copy=True)),
            torch.LongTensor(np.repeat(users, negatives.shape[1])),
            torch.LongTensor(negatives.reshape(-1)),
        ]

    reference_data.SampleGenerator._sample_negative = shims["project_negatives"](test_negatives)
    reference_data.SampleGenerator.validate_data = property(validate_data)
    valid_items = torch.as_tensor(np.load(settings["valid_items"]), dtype=torch.long)
    evaluate = reference_engine.Engine.federatedEvaluate
    calls = {"valid": 0, "test": 0}

    def logged_evaluate(self, evaluate_data):
        hit_ratio, ndcg = evaluate(self, evaluate_data)
        split = "valid" if torch.equal(evaluate_data[1].cpu(), valid_items) else "test"
        calls[split] += 1
        print(f"round {calls[split]} {split} HR@10={hit_ratio:.6f} NDCG@10={ndcg:.6f}", flush=True)
        return hit_ratio, ndcg

    reference_engine.Engine.federatedEvaluate = logged_evaluate
    if settings.get("personal_init") == "zero":
        import model.model as reference_model

        drawn = reference_model.FedRAP.__init__

        def zero_personal(self, config):
            drawn(self, config)
            torch.nn.init.zeros_(self.item_personality.weight)

        reference_model.FedRAP.__init__ = zero_personal
    if settings.get("fast_loader"):
        from fedrec_lab.reference.batches import SameBatches  # the installed project's

        def same_batches(self, user_train_data):
            tensors = (
                torch.LongTensor(user_train_data[0]),
                torch.LongTensor(user_train_data[1]),
                torch.FloatTensor(user_train_data[2]),
            )
            return SameBatches(tensors, self.config["batch_size"])

        reference_engine.Engine.instanceUserTrainLoader = same_batches

    run = Path.cwd() / "run"
    (run / "logs").mkdir(parents=True, exist_ok=True)
    os.chdir(run)
    sys.argv = ["train.py", *settings["arguments"]]
    runpy.run_path(str(Path(repo) / "train.py"), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1])
