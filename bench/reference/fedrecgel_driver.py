"""Runs FedRecGEL's reference code (anonymifish/FedRecGEL) in this process; started by
``bench/reference/fedrecgel.py``, never imported by the project.

``python -I fedrecgel_driver.py SETTINGS.json``, from a scratch folder (the reference writes
its log under ``./exp_results``). The settings name the reference checkout, the data folder in
the reference's layout, the seed and the reference's own configuration values. This driver
replaces the reference's ``main.py`` (which reads a fixed ``configs/exp_config.json``) and
calls its ``methods.fedrecgel.fedrecgel(args)`` unchanged; what it adds, all outside the
reference's files:

1. the seed: Python's ``random``, NumPy and PyTorch are seeded (the reference seeds nothing);
2. ``device = "cpu"`` in the configuration (no edit of the code is needed for the CPU);
3. an empty ``models.fedrap`` module with a ``RAPBase`` class, registered before the import:
   the reference's ``utils/evaluate.py`` imports it, and the repository does not contain it
   (the ``isinstance`` test it serves is then false, the NeuMF path is taken);
4. ``torch.save`` does nothing in this process: the reference saves the whole model at each
   new best round, which only fills the disk;
5. after each evaluation of the reference on the test file, the same model (the reference's
   own ``refactoring`` of the clients and server) is evaluated by the reference's
   ``top100_metrics`` on the validation file, and both are logged as one line each
   (``round R valid|test HR@10=… NDCG@10=…``).

An ablation, only when the settings ask for it (``"dense_init": "pytorch"``): after the
reference initialises its server model (Xavier-uniform tower, Kaiming-uniform output layer,
zero biases), each of its ``nn.Linear`` layers is re-initialised with PyTorch's default
(``reset_parameters``), the init this project's NeuMF uses; the embeddings keep the
reference's N(0, 0.01).
"""

from __future__ import annotations

import json
import logging
import random
import sys
import types
from pathlib import Path


def main(settings_path: str) -> None:
    settings = json.loads(Path(settings_path).read_text())
    sys.path.insert(0, settings["repo"])

    import numpy as np
    import torch

    torch.set_num_threads(settings["threads"])
    seed = settings["seed"]
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

    class RAPBase:  # the class the reference's evaluate.py imports; no model is one
        pass

    stub = types.ModuleType("models.fedrap")
    stub.RAPBase = RAPBase
    sys.modules["models.fedrap"] = stub
    torch.save = lambda *args, **kwargs: None

    from data.dataset import RecDataset
    from methods import fedrecgel as method
    from models.fedrecgel import FedRecGELServer
    from modules.ClientCluster import ClientCluster
    from torch.utils.data import DataLoader
    from utils.evaluate import top100_metrics
    from utils.save_utils import construct_logger

    args = types.SimpleNamespace(**settings["config"])
    args.save_path = f"./exp_results/{args.model}/{args.dataset}/{args.method}/"
    Path(args.save_path).mkdir(parents=True, exist_ok=True)
    args.logger = construct_logger(args)
    args.logger.info("settings: %s", json.dumps(settings["config"], sort_keys=True))

    valid_rows = []
    valid_file = Path(settings["valid_file"])
    for line in valid_file.read_text().splitlines():
        head, *negatives = line.split("\t")
        user, item = (int(x) for x in head.strip("()").split(","))
        valid_rows += [[user, item]] + [[user, int(n)] for n in negatives]
    valid_loader = DataLoader(
        RecDataset(valid_rows, 0, 0, None, 0, False, args.model),
        batch_size=args.test_num_ng + 1,
        shuffle=False,
        num_workers=0,
    )
    evaluate = ClientCluster.evalue
    done = {"rounds": 0}

    def evalue_with_validation(self, *arguments):
        hr, ndcg, model = evaluate(self, *arguments)
        valid_hr, valid_ndcg = top100_metrics(model, valid_loader)
        done["rounds"] += 1
        r = done["rounds"]
        logger = logging.getLogger()
        logger.info(f"round {r} valid HR@10={valid_hr[1]:.6f} NDCG@10={valid_ndcg[1]:.6f}")
        logger.info(f"round {r} test HR@10={hr[1]:.6f} NDCG@10={ndcg[1]:.6f}")
        return hr, ndcg, model

    ClientCluster.evalue = evalue_with_validation
    if settings.get("dense_init") == "pytorch":
        initialise = FedRecGELServer.init_serve_weights

        def pytorch_dense_init(self):
            initialise(self)
            for module in self.modules():
                if isinstance(module, torch.nn.Linear):
                    module.reset_parameters()

        FedRecGELServer.init_serve_weights = pytorch_dense_init
    method.fedrecgel(args)


if __name__ == "__main__":
    main(sys.argv[1])
