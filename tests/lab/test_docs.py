"""The README and the documentation site say only what the committed results say.

- Results pages include the generated files under ``bench/results/`` as they are
  (``--8<-- "bench/results/<file>.md"``), and every such report is included by some page.
- A table copied from a results file sits between ``<!-- table from <file> ... -->`` and
  ``<!-- end table -->``; it must equal what its spec selects from the file now. After a
  results file changed, rewrite the copies with ``python tests/lab/test_docs.py --update``.
- Each number of the README's measured facts is in the file that row cites.
- The README states the two test tiers that ``.ci/run`` runs (fast, then ``-m slow``).
- The repository speaks of the project only: no development history (numbered work steps,
  tickets, working sessions) outside CHANGELOG.md.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
RESULTS = ROOT / "bench" / "results"

SNIPPET = re.compile(r'^--8<-- "([^"]+)"\s*$', re.MULTILINE)
TABLE_BLOCK = re.compile(
    r"^(<!-- table from (?P<source>\S+)\n(?P<spec>.*?)-->\n)(?P<body>.*?)(<!-- end table -->)",
    re.DOTALL | re.MULTILINE,
)
TABLE_START = re.compile(r"^<!-- table from ", re.MULTILINE)
NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")


def markdown_pages() -> list[Path]:
    """README.md and every page of the documentation site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


# --- tables copied from results files ---------------------------------------------------------


def cells(line: str) -> list[str]:
    """The cells of one Markdown table line, stripped."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def tables(text: str) -> list[list[str]]:
    """Every Markdown table of ``text`` as its lines (header, separator, rows)."""
    found: list[list[str]] = []
    current: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            current.append(line)
            continue
        if len(current) >= 2 and set(current[1].replace("|", "").strip()) <= set("-: "):
            found.append(current)
        current = []
    return found


def parse_spec(spec: str) -> tuple[list[str], dict[str, set[str]]]:
    """``columns: a | b`` and ``rows: column = v1 | v2`` lines of a table spec."""
    columns: list[str] = []
    filters: dict[str, set[str]] = {}
    for raw in spec.splitlines():
        line = raw.strip()
        if line.startswith("columns:"):
            columns = [c.strip() for c in line.removeprefix("columns:").split("|")]
        elif line.startswith("rows:"):
            column, _, values = line.removeprefix("rows:").partition("=")
            filters[column.strip()] = {v.strip() for v in values.split("|")}
        elif line:
            raise ValueError(f"table spec line {line!r}: write 'columns: ...' or 'rows: ...'")
    if not columns:
        raise ValueError("a table spec needs a 'columns: a | b' line")
    return columns, filters


def select(source: Path, spec: str) -> str:
    """The rows and columns ``spec`` names from the first table of ``source`` that has them."""
    columns, filters = parse_spec(spec)
    wanted = set(columns) | set(filters)
    for table in tables(source.read_text()):
        header = cells(table[0])
        if not wanted <= set(header):
            continue
        index = {name: k for k, name in enumerate(header)}
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        for line in table[2:]:
            row = cells(line)
            if all(row[index[c]] in values for c, values in filters.items()):
                lines.append("| " + " | ".join(row[index[c]] for c in columns) + " |")
        if len(lines) == 2:
            raise ValueError(f"{source.relative_to(ROOT)}: no row matches {filters}")
        return "\n".join(lines) + "\n"
    raise ValueError(f"{source.relative_to(ROOT)} has no table with the columns {sorted(wanted)}")


def regenerate(text: str) -> str:
    """``text`` with every copied table rewritten from its source file."""

    def fill(match: re.Match[str]) -> str:
        body = select(ROOT / match["source"], match["spec"])
        return match.group(1) + body + match.group(5)

    return TABLE_BLOCK.sub(fill, text)


def update() -> None:
    """Rewrite the copied tables of README.md and docs/ from bench/results."""
    for page in markdown_pages():
        text = page.read_text()
        new = regenerate(text)
        if new != text:
            page.write_text(new)
            print(f"updated {page.relative_to(ROOT)}")


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_copied_tables_equal_their_results_files(page: Path) -> None:
    text = page.read_text()
    for match in TABLE_BLOCK.finditer(text):
        assert (ROOT / match["source"]).is_file(), f"{page.name}: no file {match['source']}"
        assert match["body"] == select(ROOT / match["source"], match["spec"]), (
            f"{page.relative_to(ROOT)}: the table copied from {match['source']} differs from "
            "that file; run `python tests/lab/test_docs.py --update` and commit the pages"
        )
    assert len(TABLE_START.findall(text)) == len(TABLE_BLOCK.findall(text)), (
        f"{page.relative_to(ROOT)}: a '<!-- table from' block lacks its '<!-- end table -->'"
    )


def test_a_drifted_copy_is_found() -> None:
    """The check above fails when a results file says something else than its copy."""
    source = "bench/results/strict.md"
    spec = "rows: method = pfedrec\ncolumns: dataset | method | test HR@10\n"
    page = f"<!-- table from {source}\n{spec}-->\n| stale |\n<!-- end table -->\n"
    fresh = regenerate(page)
    assert fresh != page and "| ML-100K | pfedrec |" in fresh
    assert regenerate(fresh) == fresh


# --- results files included as they are -------------------------------------------------------


def included_files() -> dict[str, list[Path]]:
    """Each file a docs page includes with ``--8<--``: the pages that include it."""
    found: dict[str, list[Path]] = {}
    for page in sorted(DOCS.rglob("*.md")):
        for target in SNIPPET.findall(page.read_text()):
            found.setdefault(target, []).append(page)
    return found


def test_included_files_exist() -> None:
    for target, pages in included_files().items():
        assert (ROOT / target).is_file(), f"{pages[0].relative_to(ROOT)} includes {target}"


def test_every_results_report_is_on_a_docs_page() -> None:
    reports = {
        str(path.relative_to(ROOT))
        for path in RESULTS.rglob("*.md")
        if "runs" not in path.relative_to(RESULTS).parts
    }
    missing = sorted(reports - set(included_files()))
    assert not missing, (
        f"results reports no docs page shows: {missing}; include each in a page under "
        'docs/results/ (or docs/scale.md, docs/privacy.md) with --8<-- "<path>"'
    )


# --- the README --------------------------------------------------------------------------------


def test_readme_is_short() -> None:
    lines = README.read_text().count("\n")
    assert lines <= 300, f"README.md has {lines} lines: move detail into a docs/ page"


#: The two test tiers, as .ci/run runs them and the README states them.
TEST_TIERS = ("python -m pytest", "python -m pytest -m slow")


def command_lines(text: str) -> list[str]:
    """The lines of ``text`` that run pytest, comments after them left out."""
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line.startswith("python -m pytest")]


def test_readme_test_commands_are_what_ci_runs() -> None:
    ci = command_lines((ROOT / ".ci" / "run").read_text())
    assert ci == list(TEST_TIERS), f".ci/run runs {ci}; it should run the tiers {TEST_TIERS}"
    readme = command_lines(README.read_text())
    assert all(tier in readme for tier in TEST_TIERS), (
        f"README.md states {readme}; state both tiers, each on its own line: {TEST_TIERS}"
    )


def ci_checks(text: str) -> list[str]:
    """The checks ``.ci/run`` runs after installing: each command line of ``text`` after the
    ``export``s, comments and ``--site-dir`` (a temporary folder) left out."""
    body = text[text.rindex("\nexport ") :].split("\n", 2)[2]
    lines = (line.split("#", 1)[0].strip() for line in body.splitlines())
    return [line.split(" --site-dir", 1)[0] for line in lines if line]


def test_the_development_page_names_every_check_ci_runs() -> None:
    ci = ci_checks((ROOT / ".ci" / "run").read_text())
    page = (DOCS / "development.md").read_text()
    start = page.index("\n## CI\n")
    section = page[start : page.find("\n## ", start + 1)]
    missing = [check for check in ci if f"`{check}`" not in section]
    assert "mypy" in ci and not missing, (
        f".ci/run runs {ci}; docs/development.md's CI section does not name {missing}"
    )


def test_the_fast_tier_leaves_out_the_slow_tests_and_the_slow_tier_runs_them() -> None:
    """Plain ``python -m pytest`` deselects ``slow`` (pyproject's addopts); a later ``-m slow``
    replaces that selection, so every test is in exactly one tier."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    options = shlex.split(settings["ini_options"]["addopts"])
    assert options[options.index("-m") + 1] == "not slow", f"addopts {options}: add -m 'not slow'"
    assert any(marker.startswith("slow:") for marker in settings["ini_options"]["markers"])


def test_readme_links_to_files_that_exist() -> None:
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text()):
        if not re.match(r"[a-z]+:", target):
            assert (ROOT / target).exists(), f"README.md links to {target}, which is not here"


def facts() -> list[tuple[str, str]]:
    """The README's measured facts: (measured cell, source cell) of each row."""
    text = README.read_text()
    if "<!-- facts -->" not in text:
        return []
    table = tables(text[text.index("<!-- facts -->") :])[0]
    header = cells(table[0])
    measured, source = header.index("measured"), header.index("source")
    return [(cells(line)[measured], cells(line)[source]) for line in table[2:]]


def test_readme_states_measured_facts() -> None:
    assert len(facts()) >= 5, "README.md: a '<!-- facts -->' table of measured facts"


def without_thousands(text: str) -> str:
    return re.sub(r"(?<=\d),(?=\d{3})", "", text)


@pytest.mark.parametrize("fact", facts(), ids=lambda fact: fact[0][:40])
def test_each_measured_fact_is_in_its_source(fact: tuple[str, str]) -> None:
    measured, source = fact
    paths = [ROOT / p for p in re.findall(r"`([\w./-]+\.(?:md|py|json))`", source)]
    assert paths and all(p.is_file() for p in paths), f"no committed source in {source!r}"
    texts = without_thousands("\n".join(p.read_text() for p in paths))
    for name in re.findall(r"`(test_\w+)`", source):
        assert f"def {name}(" in texts, f"{source}: no test named {name}"
    for number in NUMBER.findall(without_thousands(measured)):
        assert re.search(rf"(?<![\d.]){re.escape(number)}(?!\d)", texts), (
            f"{number} of {measured!r} is not in {source}"
        )


# --- the project speaks of itself only ---------------------------------------------------------

#: Development history: numbered work steps, tickets and their notes.
HISTORY = re.compile(
    r"\bsince stop\b|\bstop[ -]\d|\bissue[ -]#?\d|\bissue note\b|\bissue's rule\b"
    r"|\b(?:benchmark|fedrap|redesign) issue\b",
    re.IGNORECASE,
)
#: Working sessions; in Python, test fixtures and checkpoints have sessions of their own.
SESSION = re.compile(r"\bsessions?\b", re.IGNORECASE)
TEXT_SUFFIXES = {".md", ".py", ".toml", ".sh", ".txt", ".yml", ".yaml", ".cfg", ".json", ".csv"}
EXEMPT = {"CHANGELOG.md", "tests/lab/test_docs.py"}


def tracked_text_files() -> list[str]:
    listing = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [
        name
        for name in listing
        if name not in EXEMPT
        and (Path(name).suffix in TEXT_SUFFIXES or name in {".ci/run", ".gitignore"})
    ]


def test_the_project_speaks_of_itself_only() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no list of tracked files")
    found: list[str] = []
    for name in tracked_text_files():
        path = ROOT / name
        if not path.is_file():
            continue  # deleted in the work tree, not yet committed
        check_sessions = path.suffix not in {".py", ".json", ".csv"} and not (
            name.startswith("bench/results/") and path.suffix == ".txt"  # raw pytest logs
        )
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if HISTORY.search(line) or (check_sessions and SESSION.search(line)):
                found.append(f"{name}:{number}: {line.strip()[:100]}")
    assert not found, (
        "development history belongs in CHANGELOG.md; say what the project does instead:\n"
        + "\n".join(found)
    )


def test_the_own_data_guide_is_instructions() -> None:
    """Instructions, at most 1,500 words: measured reports are linked (results pages), not
    pasted."""
    text = (DOCS / "own-data.md").read_text()
    words = len(text.split())
    assert words <= 1500, f"docs/own-data.md has {words} words: move detail to a linked page"
    assert not SNIPPET.search(text), "docs/own-data.md: link results pages, do not include them"


# --- the docs describe what is, not how it came to be ------------------------------------------

#: Words that tell the project's history ("The presets now take ...", "these tables predate
#: ...", "They were run before the pruner was asked ..."): what changed belongs in
#: CHANGELOG.md, the pages say what is.
HISTORY_WORDS = re.compile(
    r"\b(?:now|earlier|predates?|predated|no longer|formerly|previously|nowadays)\b"
    r"|\bbefore the\b[^.]{0,80}?\b(?:was|were)\b",
    re.IGNORECASE,
)
#: Where a history word is no history, page by page: the text it must sit in, and why.
HISTORY_ALLOWED: dict[str, tuple[str, ...]] = {}
CODE = re.compile(r"`[^`]*`")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, text) of the prose of a Markdown page: fenced blocks, HTML comments and
    inline code left out (a code sample's words are no history)."""
    found, fenced, comment = [], False, False
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            continue
        if stripped.startswith("<!--"):
            comment = "-->" not in stripped
            continue
        if comment:
            comment = "-->" not in stripped
            continue
        if not fenced:
            found.append((number, CODE.sub("", line)))
    return found


def history_phrases(name: str, text: str) -> list[str]:
    allowed = HISTORY_ALLOWED.get(name, ())
    lines = prose_lines(text)
    # a sentence may run over two lines ("before the pruner / was asked"): look at each line
    # with the next one joined
    found = []
    for index, (number, line) in enumerate(lines):
        joined = line + " " + (lines[index + 1][1] if index + 1 < len(lines) else "")
        match = HISTORY_WORDS.search(joined)
        if match and match.start() < len(line) and not any(a in joined for a in allowed):
            found.append(f"{name}:{number}: {match.group(0)!r} in {line.strip()[:90]}")
    return found


def test_the_pages_tell_no_history() -> None:
    found = []
    for page in markdown_pages():
        name = str(page.relative_to(ROOT))
        if name != "docs/changelog.md":  # the changelog is history, by design
            found += history_phrases(name, page.read_text())
    assert not found, (
        "the pages say what is; what changed goes in CHANGELOG.md. Rephrase:\n" + "\n".join(found)
    )


def test_history_words_are_found_in_prose_and_not_in_code() -> None:
    page = (
        "The presets now take lr 2.\nThese tables predate the speedups.\n"
        "They were run before the pruner\nwas asked after every round.\n"
        "```bash\nfedrec run now=1\n```\nA line earlier in the file, `now` in code.\n"
    )
    found = history_phrases("x.md", page)
    assert [f.split(":")[1] for f in found] == ["1", "2", "3", "8"]


# --- every preset is on its method's page -------------------------------------------------------


def presets_by_method() -> dict[str, list[str]]:
    """Each method's presets (conf/*.toml, resolved: a plug-in preset counts for its base's
    method)."""
    from fedrec_lab.presets import resolve

    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "conf").glob("*.toml")):
        found.setdefault(resolve(path)["method"], []).append(path.name)
    return found


def test_every_preset_is_listed_on_its_method_page() -> None:
    missing = []
    for method, presets in presets_by_method().items():
        page = DOCS / "methods" / f"{method}.md"
        assert page.is_file(), f"method {method} (presets {presets}) has no page {page}"
        text = page.read_text()
        missing += [f"{page.relative_to(ROOT)}: {name}" for name in presets if name not in text]
    assert not missing, "list each preset of a method on its page:\n" + "\n".join(missing)


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/lab/test_docs.py --update")
    update()
