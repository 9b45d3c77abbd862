"""Checkpoint integrity: a byte changed in a saved array is named on load, never used."""

import zipfile

import jax
import numpy as np
import pytest

from camflow_jax import estimate, models
from camflow_jax.models import checkpoint

CFG = {"group_sizes": [12, 12], "embed_dim": 8, "depths": (1, 1, 1), "num_heads": (2, 4, 8),
       "height": 64, "width": 128}


@pytest.fixture(scope="module")
def variables():
    model = models.build_model(CFG)
    return models.init_variables(model, jax.random.key(0), 64, 128)


def _flip_one_byte_in_largest_file(folder):
    files = sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = bytearray(files[-1].read_bytes())
    data[len(data) // 2] ^= 0x40
    files[-1].write_bytes(bytes(data))


def test_orbax_checkpoint_with_a_flipped_byte_is_refused(tmp_path, variables):
    d = checkpoint.save_model(tmp_path / "ck", CFG, variables)
    checkpoint.load_model(d)  # intact: loads
    _flip_one_byte_in_largest_file(d / "arrays")
    with pytest.raises(ValueError, match="checksum mismatch|could not read"):
        checkpoint.load_model(d)


def test_compact_weights_with_a_changed_array_are_refused(tmp_path, variables, capsys):
    d = checkpoint.save_compact(tmp_path / "c", CFG, variables)
    _, loaded, _, _ = checkpoint.load_model(d)
    # 16-bit with a scale per array: every value within 2^-11 of its array's largest magnitude.
    for a, b in zip(jax.tree.leaves(variables), jax.tree.leaves(loaded)):
        a, b = np.asarray(a), np.asarray(b)
        assert np.max(np.abs(a - b)) <= np.max(np.abs(a)) * 2.0 ** -11 + 1e-12
    # Rewrite one array inside the (valid) zip: the file still opens, the content changed.
    path = d / checkpoint.NPZ_FILE
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    key = next(k for k in arrays if k.endswith("kernel"))
    arrays[key] = arrays[key].copy()
    arrays[key].flat[0] += np.float16(0.5)
    np.savez_compressed(path, **arrays)
    assert zipfile.is_zipfile(path)
    with pytest.raises(ValueError, match=f"checksum mismatch in 1 array.*{key}"):
        checkpoint.load_model(d)
    img = np.zeros((32, 64, 3), np.uint8)
    import cv2

    cv2.imwrite(str(tmp_path / "a.png"), img)
    code = estimate.main([str(tmp_path / "a.png"), str(tmp_path / "a.png"), "--checkpoint", str(d),
                          "-o", str(tmp_path / "out")])
    assert code == 2 and "checksum mismatch" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
