"""Raw datasets: the registry, loaders, downloads, the synthetic generator and prepared splits."""
