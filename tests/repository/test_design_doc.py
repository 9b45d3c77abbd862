"""docs/design.md is the page docstrings point at: every ``docs/design.md, "Section"``
reference in the package, the tools and the tests names one of its headings."""

import re
from pathlib import Path

from helpers import ROOT

REF = re.compile(r'docs/design\.md,\s+"([^"]+)"')


def _headings() -> set[str]:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    return {m.group(1).strip() for m in re.finditer(r"^#{2,4}\s+(.+)$", text, re.M)}


def test_docstring_references_name_existing_sections():
    headings = _headings()
    assert {"Conventions", "Data flow", "Checkpoint formats"} <= headings
    refs = []
    for folder in ("camflow_jax", "tools", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.resolve() == Path(__file__).resolve():
                continue
            for m in REF.finditer(path.read_text(encoding="utf-8")):
                refs.append((str(path.relative_to(ROOT)), m.group(1)))
    assert len(refs) >= 10  # the pattern still matches how docstrings cite the page
    missing = [(f, name) for f, name in refs if name not in headings]
    assert not missing, f"references to sections docs/design.md does not have: {missing}"
