"""tools/export_pretrained.py: a training workdir written as compact package weights.

The workdir is the session's 4-step reference run (conftest). The oracle for the 16-bit arrays
is numpy: each loaded array within half a float16 step of its largest magnitude of the float32
one. The default destination is where the package looks for its shipped models
(:data:`camflow_jax.models.checkpoint.WEIGHTS_DIR`, what :func:`pretrained_path` reads).
"""

import json

import numpy as np

from camflow_jax.models import checkpoint
from tools import export_pretrained


def test_export_writes_compact_weights_the_package_can_load(four_steps_one_device, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(checkpoint, "WEIGHTS_DIR", tmp_path / "weights")
    assert export_pretrained.main([str(four_steps_one_device), "--name", "mine", "--pairs", "1"]) == 0
    out = tmp_path / "weights" / "mine"
    assert sorted(p.name for p in out.iterdir()) == ["model.json", checkpoint.NPZ_FILE]
    assert checkpoint.pretrained_path("mine") == out  # where the package looks for shipped models
    meta = json.loads((out / "model.json").read_text())
    assert meta["info"]["source"] == four_steps_one_device.name and "config" in meta["info"]
    assert 0 <= meta["info"]["compact_roundtrip_mean_flow_diff_px"] < 0.05
    assert "wrote" in capsys.readouterr().out

    _, full, _, _ = checkpoint.load_model(four_steps_one_device)
    _, compact, _, _ = checkpoint.load_model(out)
    a, b = checkpoint.flatten(full), checkpoint.flatten(compact)
    assert a.keys() == b.keys()
    for k in a:
        x = np.asarray(a[k], np.float64)
        scale = np.abs(x).max() if x.size else 0.0
        assert np.abs(np.asarray(b[k], np.float64) - x).max() <= scale * 2.0 ** -11 + 1e-12, k

    # an existing model is kept unless -y
    before = (out / checkpoint.NPZ_FILE).read_bytes()
    assert export_pretrained.main([str(four_steps_one_device), "--name", "mine"]) == 2
    assert "exists" in capsys.readouterr().err and (out / checkpoint.NPZ_FILE).read_bytes() == before
