"""Parity with the released PyTorch CamFlow: converted weights reproduce its outputs.

The reference is an in-repo fixture, ``tests/fixtures/parity/camflow_released_128x256.npz``:
a state dict in the released naming and the outputs the released model computed from it (see
that folder's README for how it was made and what it holds). The tests fail if it is missing.

The converted model runs at the 'exact' precision policy (float32, dots and convolutions at
HIGHEST: docs/performance.md, "Precision policy"), set explicitly, so the tolerances hold on
every backend: at a GPU's default TF32 they do not (measured on an H200: flows 1.8e-2 px off).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from camflow_jax.models import checkpoint, importing, official
from helpers import FIXTURES, ROOT

FIXTURE = FIXTURES / "parity" / "camflow_released_128x256.npz"


@pytest.fixture(scope="module")
def fixture_path() -> Path:
    assert FIXTURE.is_file(), (f"parity fixture {FIXTURE} is missing; it is part of the repository "
                               "(see tests/fixtures/parity/README.md)")
    return FIXTURE


def _reference_flow(sd_basis: np.ndarray, coeff: np.ndarray, height: int, width: int) -> np.ndarray:
    """The released flow: coefficient-weighted sum of the released basis buffer.

    The released basis buffer is (1, N, 2*H*W) with the u plane, then the v plane, each
    row-major; the released model forms its flow as this sum (the fixture's README records that
    the stored flows matched it to 6e-6 px before they were dropped).
    """
    n = sd_basis.shape[-2]
    basis = sd_basis.reshape(n, 2, height, width).astype(np.float64)
    return np.einsum("bn,nchw->bhwc", coeff.reshape(-1, n).astype(np.float64), basis)


def test_converted_model_reproduces_released_outputs(fixture_path):
    model, variables, bases = official.load_released(fixture_path)
    assert model.config.precision == "exact"
    ref = np.load(fixture_path)
    gray = ref["input_gray"].astype(np.float32)  # (B, 2, H, W): channel 0 = image 1
    b, _, h, w = gray.shape
    assert (b, h, w) == (2, 128, 256) and bases.shape == (24, h, w, 2)
    out = jax.jit(model.apply)(variables, gray[:, 0, ..., None], gray[:, 1, ..., None], bases)
    out = jax.tree.map(np.asarray, out)
    for ours, theirs in (("coeffs_f", "out/coeff_f"), ("coeffs_b", "out/coeff_b")):
        r = ref[theirs][..., 0]
        assert np.abs(out[ours] - r).max() <= 1e-4 * np.abs(r).max(), ours
    for ours, theirs in (("flow_f", "out/coeff_f"), ("flow_b", "out/coeff_b")):
        flow = _reference_flow(ref["sd/h_net.basis"], ref[theirs], h, w)
        assert np.abs(out[ours] - flow).max() <= 1e-3, ours
    for ours, theirs in (("logvar_f", "out/mask_f"), ("logvar_b", "out/mask_b")):
        assert np.abs(out[ours][..., 0] - ref[theirs][:, 0]).max() <= 1e-4, ours
    # The case must be informative: large flows, masks that are not all zero, and samples whose
    # outputs differ by far more than the tolerances (so mixing up the batch would be caught).
    flow = _reference_flow(ref["sd/h_net.basis"], ref["out/coeff_f"], h, w)
    assert np.abs(flow).max() > 10 and np.abs(flow[0] - flow[1]).max() > 0.1
    assert ref["out/mask_f"].max() > 0 and ref["out/mask_b"].max() > 0
    assert np.abs(ref["out/mask_f"][0] - ref["out/mask_f"][1]).max() > 0.01


def test_forward_only_reproduces_the_released_forward_outputs(fixture_path):
    """``forward_only=True`` (the stabilizer's path: the motion transformer and the mask net on
    the forward rows alone) against the released model's forward outputs, at the same
    tolerances as the two-direction pass."""
    model, variables, bases = official.load_released(fixture_path)
    ref = np.load(fixture_path)
    gray = ref["input_gray"].astype(np.float32)
    h, w = gray.shape[2:]
    apply = jax.jit(model.apply, static_argnames=("forward_only",))
    out = jax.tree.map(np.asarray, apply(variables, gray[:, 0, ..., None], gray[:, 1, ..., None], bases,
                                         forward_only=True))
    assert not any(k.endswith("_b") for k in out), sorted(out)
    r = ref["out/coeff_f"][..., 0]
    assert np.abs(out["coeffs_f"] - r).max() <= 1e-4 * np.abs(r).max()
    assert np.abs(out["flow_f"] - _reference_flow(ref["sd/h_net.basis"], ref["out/coeff_f"], h, w)).max() <= 1e-3
    assert np.abs(out["logvar_f"][..., 0] - ref["out/mask_f"][:, 0]).max() <= 1e-4
    with pytest.raises(ValueError, match="forward_only"):
        model.apply(variables, gray[:, 0, ..., None], gray[:, 1, ..., None], bases, bases, forward_only=True)


def test_basis_layouts_agree(fixture_path):
    # Index oracle on a synthetic buffer: value = n * 1e6 + c * 1e5 + y * 1e3 + x, stored as
    # (1, N, 2*H*W) with the u plane (c = 0) then the v plane, each row-major.
    n, h, w = 3, 4, 5
    idx = np.indices((n, 2, h, w))
    code = (idx[0] * 10**6 + idx[1] * 10**5 + idx[2] * 10**3 + idx[3]).astype(np.float32)
    got = official.released_bases({"h_net.basis": code.reshape(1, n, 2 * h * w)}, h, w)
    assert got.shape == (n, h, w, 2)
    assert got[2, 3, 4, 1] == 2 * 10**6 + 1 * 10**5 + 3 * 10**3 + 4
    assert got[1, 0, 2, 0] == 1 * 10**6 + 2
    # On the fixture: u and v are the first and second half of each basis's row, and every
    # released field is scaled to max |value| = 1.
    sd, extras = official.read_state_dict(fixture_path)
    h, w = extras["config"]["crop_size"]
    bases = official.released_bases(sd, h, w)
    raw = sd["h_net.basis"].reshape(24, 2 * h * w).astype(np.float32)
    np.testing.assert_array_equal(bases[..., 0].reshape(24, -1), raw[:, :h * w])
    np.testing.assert_array_equal(bases[..., 1].reshape(24, -1), raw[:, h * w:])
    np.testing.assert_allclose(np.abs(bases).max(axis=(1, 2, 3)), 1.0)
    with pytest.raises(ValueError, match="2\\*64\\*64"):
        official.released_bases(sd, 64, 64)


def test_converter_rejects_missing_and_misshaped_weights(fixture_path):
    sd, _ = official.read_state_dict(fixture_path)
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


def test_converter_errors_name_the_state_dict_key(fixture_path):
    """Issue 44: a bad weight gave numpy's words ('axes don't match array', 'could not convert
    string to float', an IndexError) or a multi-line list; now one line naming the key, its
    shape and the release's expected shape."""
    sd, _ = official.read_state_dict(fixture_path)
    key = "mask_generator.conv1.0.weight"
    assert sd[key].shape == (8, 2, 3, 3)
    cases = [
        (sd[key][0, 0], f"released weight {key} has shape [3, 3]: it does not fit the model's "
                        "params/mask_net/conv_0/kernel ([8, 2, 3, 3] expected)"),
        (sd[key][:-1], f"released weight {key} has shape [7, 2, 3, 3]"),
        (np.array(["a", "b"]), f"released weight {key} does not hold real numbers (dtype <U1)"),
        (sd[key].astype(np.complex64), f"released weight {key} does not hold real numbers (dtype complex64)"),
    ]
    for value, expect in cases:
        with pytest.raises(ValueError) as e:
            official.convert_state_dict(dict(sd, **{key: value}))
        assert expect in str(e.value) and "\n" not in str(e.value), str(e.value)
    tokens = r"released weight h_net.query_token has shape \[1151\].*\[1, 12, 96\] expected"
    with pytest.raises(ValueError, match=tokens):
        official.convert_state_dict(dict(sd, **{"h_net.query_token": sd["h_net.query_token"].ravel()[:-1]}))


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


def test_a_basis_of_another_rank_is_refused_naming_the_file_the_key_and_the_shape(fixture_path, tmp_path):
    """POOR (issue 63): a rank-5 basis ended in numpy's "axes don't match array" (the .npz key
    'basis'), "cannot reshape array of size ..." or an IndexError traceback, exit 1 (the state
    dict's h_net.basis). One line naming the file, the key, the shape and the expected one;
    exit 2 from the command line, nothing written."""
    data = dict(np.load(fixture_path))
    sd_basis = data["sd/h_net.basis"]  # [1, 24, 2*128*256]
    planes = sd_basis.reshape(24, 2, 128, 256)
    rank5 = tmp_path / "rank5.npz"
    np.savez(rank5, **data, basis=planes[None])
    rc, stdout, stderr = _import_cli(rank5, "-o", tmp_path / "ck")
    lines = [ln for ln in stderr.splitlines() if ln.startswith("error: ")]
    assert rc == 2 and "Traceback" not in stderr and len(lines) == 1, stderr
    assert lines[0] == (f"error: {rank5}: the array 'basis' has shape [1, 24, 2, 128, 256]; expected [N, 2, H, W] "
                        "(N basis fields, each its u and v planes on the H x W network grid)"), lines[0]
    assert not (tmp_path / "ck").exists()
    cases = {
        "basis_rank3": ({"basis": planes[:, 0]}, "the array 'basis' has shape [24, 128, 256]; expected [N, 2, H, W]"),
        "sd_rank5": ({"sd/h_net.basis": sd_basis.reshape(1, 24, 2, 128, 256)},
                     "released weight h_net.basis has shape [1, 24, 2, 128, 256]; expected [1, N, 2*H*W] (N basis "
                     "fields, each the u plane then the v plane of the H x W network grid; here [1, N, 65536] for "
                     "128x256)"),
        "sd_rank1": ({"sd/h_net.basis": sd_basis.ravel()}, "released weight h_net.basis has shape [1572864]; expected"),
        "sd_two": ({"sd/h_net.basis": np.concatenate([sd_basis, sd_basis])}, "h_net.basis has shape [2, 24, 65536]"),
        "sd_strings": ({"sd/h_net.basis": np.array(["a"])}, "released weight h_net.basis does not hold real numbers"),
    }
    for name, (change, words) in cases.items():
        path = tmp_path / f"{name}.npz"
        np.savez(path, **{**data, **change})
        with pytest.raises(ValueError) as e:
            importing.import_released(path, tmp_path / name)
        assert str(e.value).startswith(f"{path}: ") and words in str(e.value) and "\n" not in str(e.value), str(e.value)
        assert not (tmp_path / name).exists()
    # the release's own layout, and [N, 2*H*W] without the leading 1, still import
    two_d = tmp_path / "two_d.npz"
    np.savez(two_d, **{**data, "sd/h_net.basis": sd_basis[0]})
    assert importing.import_released(two_d, tmp_path / "ok")[2] == (24, 128, 256, 2)


def _import_cli(*args):
    """Runs tools/import_official_checkpoint.py as users do: (exit status, stdout, stderr)."""
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "import_official_checkpoint.py"), *map(str, args)],
                       capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout, r.stderr


def test_import_writes_loadable_checkpoint(fixture_path, tmp_path):
    out = tmp_path / "ck"
    path, n, shape = importing.import_released(fixture_path, out)
    assert (path, f"{n:,}", shape) == (str(out.resolve()), "2,594,689", (24, 128, 256, 2))
    model, variables, bases, cfg = checkpoint.load_model(out)
    assert (cfg["height"], cfg["width"], bases.shape) == (128, 256, (24, 128, 256, 2))
    assert cfg["precision"] == model.config.precision == "exact"  # written explicitly, read back
    ref_vars = official.load_released(fixture_path)[1]
    for a, b in zip(jax.tree.leaves(ref_vars), jax.tree.leaves(variables)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(FileNotFoundError, match="not found"):
        importing.import_released(tmp_path / "missing.pth", tmp_path / "x")
    with pytest.raises(FileExistsError, match="already"):  # exists, no overwrite
        importing.import_released(fixture_path, out)


def test_import_tool_command_line(fixture_path, tmp_path):
    out = tmp_path / "ck"
    rc, stdout, _ = _import_cli(fixture_path, "-o", out)
    assert rc == 0 and "2,594,689 parameters" in stdout
    assert checkpoint.read_model_config(out)["height"] == 128
    rc, _, stderr = _import_cli(tmp_path / "missing.pth", "-o", tmp_path / "x")
    assert rc == 2 and "not found" in stderr
    rc, _, stderr = _import_cli(fixture_path, "-o", out)  # exists, no --overwrite
    assert rc == 2 and "already" in stderr


def test_released_pth_checkpoint_wrapped_in_state_dict(fixture_path, tmp_path):
    torch = pytest.importorskip("torch")  # optional extra; the .npz path above needs no torch
    sd, _ = official.read_state_dict(fixture_path)
    path = tmp_path / "ckpt.pth"
    torch.save({"state_dict": {"module." + k: torch.from_numpy(v) for k, v in sd.items()}, "epoch": 1}, path)
    _, variables, bases = official.load_released(path, size=(128, 256))
    _, ref_vars, ref_bases = official.load_released(fixture_path)
    np.testing.assert_array_equal(bases, ref_bases)
    for a, b in zip(jax.tree.leaves(ref_vars), jax.tree.leaves(variables)):
        np.testing.assert_array_equal(a, b)
