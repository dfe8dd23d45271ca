"""MkDocs hooks: the methods' pages in the navigation, from the registry; the plots under
``bench/results/`` as site files under ``results/``.

Each shipped method (a card declared in ``fedrec_flwr.methods``) has its page
``docs/methods/<name>.md``, listed under its card's title after the page the navigation
names in :data:`METHODS_AFTER`, in registry order; a missing page stops the build. A results
page (``docs/results/<page>.md``) shows a committed plot with ``![...](strict.png)`` without a
copy of it in ``docs/``: the plot is served from where the experiment wrote it.
"""

from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

#: The folder, relative to the repository root, whose plots the site serves as ``results/``.
RESULTS = Path("bench/results")
#: The navigation entry the methods' pages follow.
METHODS_AFTER = "methods/index.md"


def method_pages() -> list[dict[str, str]]:
    """``{title: methods/<name>.md}`` of every shipped method, in registry order."""
    from fedrec_flwr.methods import methods

    return [
        {card.title: f"methods/{name}.md"}
        for name, card in methods().items()
        if card.method.__module__.startswith("fedrec_flwr.")
    ]


def with_method_pages(nav: list[Any], pages: list[dict[str, str]]) -> bool:
    """Insert ``pages`` after the entry :data:`METHODS_AFTER` of ``nav`` (searched in every
    section); True once inserted."""
    for index, entry in enumerate(nav):
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if value == METHODS_AFTER:
            nav[index + 1 : index + 1] = pages
            return True
        if isinstance(value, list) and with_method_pages(value, pages):
            return True
    return False


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """The methods' pages in the navigation; each must exist."""
    docs = Path(config.docs_dir)
    pages = method_pages()
    missing = [page for entry in pages for page in entry.values() if not (docs / page).is_file()]
    if missing:
        raise PluginError(f"every shipped method needs its page: write {', '.join(missing)}")
    if not with_method_pages(config.nav, pages):
        raise PluginError(f"mkdocs.yml: the navigation must list {METHODS_AFTER}")
    return config


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
