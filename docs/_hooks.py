"""MkDocs hook: the plots under ``bench/results/`` become site files under ``results/``.

A results page (``docs/results/<page>.md``) shows a committed plot with ``![...](strict.png)``
without a copy of it in ``docs/``: the plot is served from where the experiment wrote it.
"""

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

#: The folder, relative to the repository root, whose plots the site serves as ``results/``.
RESULTS = Path("bench/results")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add every ``bench/results/*.png`` as ``results/<name>.png``."""
    root = Path(config.config_file_path).parent
    for plot in sorted((root / RESULTS).glob("*.png")):
        files.append(
            File(
                f"results/{plot.name}",
                src_dir=str(root / RESULTS.parent),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
            )
        )
    return files
