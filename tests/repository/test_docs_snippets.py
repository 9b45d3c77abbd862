"""docs/: every Python block of the pages below runs as written, or says it is a sketch; and no
page links to a file (or a section of a page) that is not there.

A block whose first line starts with ``# sketch`` shows an API with inputs it does not define
(``img1``, a checkpoint, a video) and is not run. The README's blocks run in test_readme.py."""

import re
from pathlib import Path

import pytest

from helpers import ROOT

DOCS = ROOT / "docs"
#: Pages whose Python blocks run here: each must stay cheap (seconds: no training, no refined pairs).
RUN = ("library.md",)
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


@pytest.mark.parametrize("name", RUN)
def test_python_blocks_run(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    blocks = [b for b in _blocks(DOCS / name) if not b.lstrip().startswith("# sketch")]
    assert blocks, f"{name} has no block to run"
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/{name} python block {i}", "exec"), {})


def test_other_python_blocks_are_marked_as_sketches():
    # A page not in RUN shows only sketches: a block that should run belongs to a page in RUN.
    unmarked = [f"{page.relative_to(ROOT)} block {i}"
                for page in _pages() if page.name != "README.md" and page.name not in RUN
                for i, block in enumerate(_blocks(page)) if not block.lstrip().startswith("# sketch")]
    assert not unmarked, f"Python blocks neither run by a test nor marked '# sketch': {unmarked}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def test_relative_links_resolve():
    bad = []
    for page in _pages():
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", link):
                continue
            path, _, anchor = link.partition("#")
            target = page.parent / path if path else page
            if not target.exists():
                bad.append(f"{page.relative_to(ROOT)}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                bad.append(f"{page.relative_to(ROOT)}: {link} (no such section)")
    assert not bad, bad
