"""Runs PFedRec's reference code (Zhangcx19/IJCAI-23-PFedRec) in this process; started by
``bench/reference/pfedrec.py``, never imported by the project.

``python -I pfedrec_driver.py SETTINGS.json``, from a scratch folder that holds
``data/<dataset>/ratings.dat`` (written by ``pfedrec.py``), ``log/`` and ``sh_result/``. The
reference's ``train.py`` runs unchanged (``runpy``), with ``--use_cuda ''`` (its ``type=bool``
flag is false only for the empty string); what this driver adds, all outside the reference's
files:

1. the seed: Python's ``random``, NumPy and PyTorch are seeded after the reference's
   ``data.py`` is imported (which seeds ``random`` with 0 at import);
2. CPU: ``torch.Tensor.cuda`` returns the tensor itself in this process (``engine.py`` calls
   ``.cuda()`` on parameters whatever ``use_cuda`` says);
3. Python >= 3.11: ``random.sample`` of a ``set`` (``data.py`` samples the training negatives
   from a set) samples ``tuple(set)``, what Python <= 3.10 did itself;
4. an empty ``tensorboardX`` module: ``engine.py`` imports ``SummaryWriter`` and never uses it;
5. the 198 evaluation negatives of each user (99 validation, then 99 test, the order
   ``data.py`` reads them in) are this project's, read from ``SETTINGS["negatives"]``, in
   place of the reference's own draw (``SampleGenerator._sample_negative``); the training
   negatives' pool is the reference's (every item the user never interacted with);
6. each call of ``Engine.fed_evaluate`` prints ``round R valid|test HR@10=… NDCG@10=…``
   (the reference logs four decimals only).
"""

from __future__ import annotations

import json
import random
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
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    board = types.ModuleType("tensorboardX")
    board.SummaryWriter = None
    sys.modules["tensorboardX"] = board

    import data as reference_data
    import engine as reference_engine

    shims = runpy.run_path(str(Path(__file__).with_name("driver_shims.py")))
    reference_data.random = shims["SetSampling"]("random")
    negatives = np.load(settings["negatives"])
    reference_data.SampleGenerator._sample_negative = shims["project_negatives"](negatives)
    valid_items = torch.as_tensor(np.load(settings["valid_items"]), dtype=torch.long)
    evaluate = reference_engine.Engine.fed_evaluate
    calls = {"valid": 0, "test": 0}

    def logged_evaluate(self, evaluate_data):
        hit_ratio, ndcg, loss = evaluate(self, evaluate_data)
        split = "valid" if torch.equal(evaluate_data[1].cpu(), valid_items) else "test"
        calls[split] += 1
        print(f"round {calls[split]} {split} HR@10={hit_ratio:.6f} NDCG@10={ndcg:.6f}", flush=True)
        return hit_ratio, ndcg, loss

    reference_engine.Engine.fed_evaluate = logged_evaluate

    seed = settings["seed"]
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    sys.argv = ["train.py", *settings["arguments"]]
    runpy.run_path(str(Path(repo) / "train.py"), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1])
