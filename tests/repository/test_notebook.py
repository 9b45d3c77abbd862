"""The quickstart notebook runs top to bottom (its code cells, in order, in one namespace)."""

import json

import matplotlib

from helpers import ROOT


def test_quickstart_notebook_runs(monkeypatch):
    matplotlib.use("Agg")
    monkeypatch.chdir(ROOT)
    nb = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text())
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert len(cells) >= 5
    namespace: dict = {}
    for i, cell in enumerate(cells):
        source = "".join(cell["source"])
        exec(compile(source, f"quickstart.ipynb cell {i}", "exec"), namespace)
    assert namespace["residual"] < 0.05          # a homography lies in the 12-basis span
    assert namespace["epe"] < namespace["zero"]  # the shipped model beats identity
    assert namespace["after"] > namespace["before"]  # the stabilized clip is steadier
