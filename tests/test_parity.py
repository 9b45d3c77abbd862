"""Parity with the released PyTorch CamFlow: converted weights reproduce its outputs.

Reference outputs come from the released model itself (shared/parity, see its README). The
folder is found via $CAMFLOW_PARITY_DIR, else the ``shared/parity`` folder next to the repo.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import jax
import numpy as np
import pytest

from camflow_jax.models import official

REPO = Path(__file__).resolve().parents[1]
PARITY_DIR = Path(os.environ.get("CAMFLOW_PARITY_DIR", REPO.parent / "shared" / "parity"))
FILES = ["camflow_official_128x256.npz", "camflow_official_192x384.npz"]

needs_parity = pytest.mark.skipif(
    not all((PARITY_DIR / f).exists() for f in FILES),
    reason=f"parity reference files not found in {PARITY_DIR} (set CAMFLOW_PARITY_DIR)")


@needs_parity
@pytest.mark.parametrize("name", FILES)
def test_converted_model_reproduces_released_outputs(name):
    path = PARITY_DIR / name
    model, variables, bases = official.load_released(path)
    ref = np.load(path)
    gray = ref["input_gray"].astype(np.float32)  # (B, 2, H, W): channel 0 = image 1
    out = jax.jit(model.apply)(variables, gray[:, 0, ..., None], gray[:, 1, ..., None], bases)
    out = jax.tree.map(np.asarray, out)
    for ours, theirs in (("flow_f", "out/flow_f"), ("flow_b", "out/flow_b")):
        assert np.abs(out[ours] - ref[theirs]).max() <= 1e-3, ours
    for ours, theirs in (("logvar_f", "out/mask_f"), ("logvar_b", "out/mask_b")):
        assert np.abs(out[ours][..., 0] - ref[theirs][:, 0]).max() <= 1e-4, ours
    for ours, theirs in (("coeffs_f", "out/coeff_f"), ("coeffs_b", "out/coeff_b")):
        r = ref[theirs][..., 0]
        assert np.abs(out[ours] - r).max() <= 1e-4 * np.abs(r).max(), ours
    # The case must be informative: large flows, and a mask that is not all zero.
    assert np.abs(ref["out/flow_f"]).max() > 10 and ref["out/mask_f"].max() > 0


@needs_parity
def test_basis_layouts_agree():
    # The released basis buffer (1, N, 2*H*W, u plane then v plane) and the channel-first copy.
    sd, extras = official.read_state_dict(PARITY_DIR / FILES[0])
    n, _, h, w = extras["basis"].shape
    np.testing.assert_array_equal(official.released_bases(sd, h, w), extras["basis"].transpose(0, 2, 3, 1))
    with pytest.raises(ValueError, match="2\\*64\\*64"):
        official.released_bases(sd, 64, 64)


@needs_parity
def test_converter_rejects_missing_and_misshaped_weights(tmp_path):
    sd, _ = official.read_state_dict(PARITY_DIR / FILES[0])
    assert official.unused_keys(sd) == []  # every released key is either used or known-unused
    broken = dict(sd)
    del broken["h_net.head2_noise.weight"]
    with pytest.raises(ValueError, match="head2_noise.weight"):
        official.convert_state_dict(broken)
    broken = dict(sd)
    broken["h_net.query_token"] = np.zeros((1, 8, 96), np.float16)
    with pytest.raises(ValueError, match="tokens_homography"):
        official.convert_state_dict(broken)
    broken = dict(sd)
    broken["mask_generator.conv1.0.bias"] = np.full((8,), np.nan, np.float32)
    with pytest.raises(ValueError, match="NaN"):
        official.convert_state_dict(broken)
    # DataParallel-style prefixes are accepted.
    wrapped = official.convert_state_dict({"module." + k: v for k, v in sd.items()})
    assert "mask_net" in wrapped["params"]


def test_unreadable_inputs(tmp_path):
    with pytest.raises(FileNotFoundError):
        official.load_released(tmp_path / "nope.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="npz"):
        official.load_released(bad)
    empty = tmp_path / "empty.npz"
    np.savez(empty, x=np.zeros(3))
    with pytest.raises(ValueError, match="sd/"):
        official.load_released(empty)


def _import_tool():
    spec = importlib.util.spec_from_file_location("import_official_checkpoint",
                                                  REPO / "tools" / "import_official_checkpoint.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@needs_parity
def test_import_tool_writes_loadable_checkpoint(tmp_path, capsys):
    pytest.importorskip("camflow_jax.checkpoint")
    from camflow_jax import checkpoint

    tool = _import_tool()
    out = tmp_path / "ck"
    assert tool.main([str(PARITY_DIR / FILES[0]), "-o", str(out)]) == 0
    assert "2,594,689 parameters" in capsys.readouterr().out
    model, variables, bases, cfg = checkpoint.load_model(out)
    assert (cfg["height"], cfg["width"], bases.shape) == (128, 256, (24, 128, 256, 2))
    ref_vars = official.load_released(PARITY_DIR / FILES[0])[1]
    for a, b in zip(jax.tree.leaves(ref_vars), jax.tree.leaves(variables)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert tool.main([str(tmp_path / "missing.pth"), "-o", str(tmp_path / "x")]) == 1
    assert "not found" in capsys.readouterr().err
    assert tool.main([str(PARITY_DIR / FILES[0]), "-o", str(out)]) == 1  # exists, no --overwrite
    assert "already" in capsys.readouterr().err


@needs_parity
def test_released_pth_checkpoint_wrapped_in_state_dict(tmp_path):
    torch = pytest.importorskip("torch")  # optional extra; the .npz path above needs no torch
    sd, _ = official.read_state_dict(PARITY_DIR / FILES[0])
    path = tmp_path / "ckpt.pth"
    torch.save({"state_dict": {"module." + k: torch.from_numpy(v) for k, v in sd.items()}, "epoch": 1}, path)
    _, variables, bases = official.load_released(path, size=(128, 256))
    _, ref_vars, ref_bases = official.load_released(PARITY_DIR / FILES[0])
    np.testing.assert_array_equal(bases, ref_bases)
    for a, b in zip(jax.tree.leaves(ref_vars), jax.tree.leaves(variables)):
        np.testing.assert_array_equal(a, b)
