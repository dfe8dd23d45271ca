"""Raw datasets: loaders, downloads, the synthetic generator and the prepared splits."""
