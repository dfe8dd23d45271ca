"""What a reference driver adds for speed, outside the reference's files: a user's train
batches as ``DataLoader(shuffle=True)`` yields them, from the same draws, without collating
sample by sample (FedRAP's driver, ``--fast-loader``)."""

from __future__ import annotations


class SameBatches:
    """The batches ``DataLoader(dataset, batch_size, shuffle=True)`` yields, from the same
    draws of PyTorch's global generator, by indexing the dataset's tensors."""

    def __init__(self, tensors, batch_size: int) -> None:
        self.tensors = tensors
        self.batch_size = batch_size

    def __iter__(self):
        import torch

        size = len(self.tensors[0])
        torch.empty((), dtype=torch.int64).random_()  # the iterator's base seed (unused)
        seed = int(torch.empty((), dtype=torch.int64).random_().item())  # RandomSampler's
        generator = torch.Generator()
        generator.manual_seed(seed)
        order = torch.randperm(size, generator=generator)
        for start in range(0, size, self.batch_size):
            index = order[start : start + self.batch_size]
            yield [tensor[index] for tensor in self.tensors]
