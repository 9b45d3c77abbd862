"""io.flo, the Predictor (rotation maths, random-weight model) and the estimate CLI."""

import json
import os
import re
import struct

import cv2
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fixtures_benchmarks as fx
from camflow_jax import estimate
from camflow_jax.estimators import registry
from camflow_jax.geometry import plausibility
from camflow_jax.io import flo
from camflow_jax.models import checkpoint
from camflow_jax.predictor import Predictor


# ----------------------------------------------------------------------------- .flo files
def test_flo_roundtrip_against_opencv(tmp_path):
    rng = np.random.default_rng(0)
    flow = rng.normal(size=(7, 11, 2)).astype(np.float32) * 5
    flo.write_flo(tmp_path / "a.flo", flow)
    np.testing.assert_array_equal(cv2.readOpticalFlow(str(tmp_path / "a.flo")), flow)
    cv2.writeOpticalFlow(str(tmp_path / "b.flo"), flow)
    np.testing.assert_array_equal(flo.read_flo(tmp_path / "b.flo"), flow)
    raw = (tmp_path / "a.flo").read_bytes()
    assert raw[:4] == b"PIEH" and struct.unpack("<ii", raw[4:12]) == (11, 7)  # width first
    assert struct.unpack("<ff", raw[12:20]) == tuple(flow[0, 0])  # (u, v) interleaved


def test_flo_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        flo.read_flo(tmp_path / "none.flo")
    (tmp_path / "bad.flo").write_bytes(b"ABCD" + b"\0" * 20)
    with pytest.raises(ValueError, match="magic"):
        flo.read_flo(tmp_path / "bad.flo")
    flo.write_flo(tmp_path / "t.flo", np.zeros((4, 4, 2)))
    (tmp_path / "t2.flo").write_bytes((tmp_path / "t.flo").read_bytes()[:-8])
    with pytest.raises(ValueError, match="truncated"):
        flo.read_flo(tmp_path / "t2.flo")
    with pytest.raises(ValueError, match=r"\[H, W, 2\]"):
        flo.write_flo(tmp_path / "x.flo", np.zeros((4, 4)))


# ----------------------------------------------------------------------------- classical CLI
def _interior_epe(flow, truth, margin=8):
    d = (flow - truth)[margin:-margin, margin:-margin]
    return float(np.hypot(d[..., 0], d[..., 1]).mean())


@pytest.mark.parametrize("h,w", [(144, 256), (256, 144)])  # landscape, portrait
def test_estimate_cli_classical_recovers_homography(tmp_path, h, w):
    rng = np.random.default_rng(5)
    img1, img2, H = fx.make_pair(rng, h, w, jitter=6.0)
    for name, img in (("1.png", img1), ("2.png", img2)):
        cv2.imwrite(str(tmp_path / name), cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
    out = tmp_path / "out"
    rc = estimate.main([str(tmp_path / "1.png"), str(tmp_path / "2.png"), "--method", "sift_magsac",
                        "-o", str(out)])
    assert rc == 0
    flow_f = np.load(out / "flow_f.npy")
    assert flow_f.shape == (h, w, 2)
    assert _interior_epe(flow_f, fx.homography_flow(H, h, w)) < 0.3
    flow_b = np.load(out / "flow_b.npy")
    assert _interior_epe(flow_b, fx.homography_flow(np.linalg.inv(H), h, w)) < 0.3
    np.testing.assert_array_equal(cv2.readOpticalFlow(str(out / "flow_f.flo")), flow_f)
    summary = json.loads((out / "homography.json").read_text())
    Hest = np.asarray(summary["homography"])
    assert _interior_epe(fx.homography_flow(Hest, h, w), fx.homography_flow(H, h, w)) < 0.3
    assert summary["mean_abs_error_aligned"] < summary["mean_abs_error_input"] / 2
    for name in ("img2_warped.png", "img1_warped.png", "overlay.png", "overlay_input.png",
                 "error_heatmap.png", "flow_f_color.png"):
        im = cv2.imread(str(out / name))
        assert im is not None and im.shape == (h, w, 3), name


def test_estimate_cli_method_names(tmp_path, capsys):
    """Any registry name; old names with a note; unknown names: one line, exit 2."""
    rng = np.random.default_rng(6)
    img1, img2, H = fx.make_pair(rng, 96, 128, jitter=4.0)
    for name, img in (("1.png", img1), ("2.png", img2)):
        cv2.imwrite(str(tmp_path / name), cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
    a, b = str(tmp_path / "1.png"), str(tmp_path / "2.png")
    assert estimate.main([a, b, "--method", "ecc", "-o", str(tmp_path / "ecc")]) == 0
    assert _interior_epe(np.load(tmp_path / "ecc" / "flow_f.npy"), fx.homography_flow(H, 96, 128)) < 0.1
    summary = json.loads((tmp_path / "ecc" / "homography.json").read_text())
    assert summary["method"] == "ecc" and summary["refined"] is False and "note" not in summary
    capsys.readouterr()
    assert estimate.main([a, b, "--method", "orb", "--no-refine", "-o", str(tmp_path / "orb")]) == 0
    err = capsys.readouterr().err
    assert "'orb' is now called 'orb_ransac'" in err and "ignores --no-refine" in err
    assert json.loads((tmp_path / "orb" / "homography.json").read_text())["method"] == "orb_ransac"
    assert estimate.main([a, b, "--method", "raft", "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown estimator 'raft'; choose from identity,") and err.count("\n") == 1
    assert estimate.main([a, b, "--method", "camflow:/nope", "--checkpoint", "/nope2",
                          "-o", str(tmp_path / "x")]) == 2
    assert "do not also give --checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_estimate_cli_reports_refinement_and_fallback(tmp_path, monkeypatch, capsys):
    """camflow asks the predictor for refinement (--no-refine: not); the summary says what ran."""
    from camflow_jax.predictor import Predictor

    class Fake:
        description, num_depth, asked = "fake", 0, []

        def __call__(self, img1, img2, depth1=None, depth2=None, intrinsics=None, refine=None, confidence=None):
            self.asked.append(refine)
            h, w = img1.shape[:2]
            flow = np.full((h, w, 2), 1.0, np.float32)
            out = {"flow_f": flow, "flow_b": -flow, "homography": np.array([[1, 0, 1], [0, 1, 1], [0, 0, 1.0]]),
                   "refined": bool(refine)}
            if refine:
                out.update(weights_f=np.ones((h, w), np.float32), refine_info={"note": "kept the start"})
            return out

    fake = Fake()
    monkeypatch.setattr(Predictor, "load", classmethod(lambda cls, *a, **k: fake))
    rng = np.random.default_rng(0)
    tex = cv2.GaussianBlur(rng.integers(0, 255, (66, 98, 3)).astype(np.uint8), (0, 0), 1.5)
    # image 1 at (x, y) is image 2 at (x + 1, y + 1): the fake's flow of 1 px is the truth
    cv2.imwrite(str(tmp_path / "a.png"), tex[1:65, 1:97])
    cv2.imwrite(str(tmp_path / "b.png"), tex[0:64, 0:96])
    a, b = str(tmp_path / "a.png"), str(tmp_path / "b.png")
    assert estimate.main([a, b, "-o", str(tmp_path / "r")]) == 0
    summary = json.loads((tmp_path / "r" / "homography.json").read_text())
    assert fake.asked == [True] and summary["method"] == "camflow" and summary["refined"] is True
    assert summary["note"] == "kept the start"
    assert "camflow (refined):" in capsys.readouterr().out
    assert estimate.main([a, b, "--no-refine", "--checkpoint", a, "-o", str(tmp_path / "n")]) == 0
    summary = json.loads((tmp_path / "n" / "homography.json").read_text())
    assert fake.asked == [True, False] and summary["method"] == "camflow_net" and not summary["refined"]
    assert estimate.main([a, b, "--refine-size", "576", "-o", str(tmp_path / "s")]) == 0
    from camflow_jax.refine import RefineConfig

    # The pair (96 px) is smaller than 576: refined at its own size, the default's below 288 px, with a note.
    assert fake.asked[-1] == RefineConfig()
    summary = json.loads((tmp_path / "s" / "homography.json").read_text())
    assert summary["note"].startswith("refine size 576 is larger than the pair (96 px on its longer side)")
    assert "note: refine size 576 is larger than the pair" in capsys.readouterr().err
    big = cv2.resize(tex, (640, 432), interpolation=cv2.INTER_CUBIC)
    cv2.imwrite(str(tmp_path / "c.png"), big[4:404, 4:604])
    cv2.imwrite(str(tmp_path / "d.png"), big[0:400, 0:600])
    assert estimate.main([str(tmp_path / "c.png"), str(tmp_path / "d.png"), "--refine-size", "576",
                          "-o", str(tmp_path / "s2")]) == 0
    assert fake.asked[-1] == RefineConfig.at_size(576)  # the finer working size reaches the predictor
    capsys.readouterr()
    for name, value in (("f1.png", 90), ("f2.png", 91)):  # no texture at all
        cv2.imwrite(str(tmp_path / name), np.full((64, 96, 3), value, np.uint8))
    assert estimate.main([str(tmp_path / "f1.png"), str(tmp_path / "f2.png"), "--method", "sift_magsac",
                          "-o", str(tmp_path / "f")]) == 0
    summary = json.loads((tmp_path / "f" / "homography.json").read_text())
    assert summary["fallback"] is True and summary["note"].startswith("identity fallback:")
    assert "warning: identity fallback: image 1 is featureless" in capsys.readouterr().err


def test_estimate_cli_without_checkpoint_runs_the_shipped_model(tmp_path, capsys):
    img = np.random.default_rng(0).integers(0, 255, (64, 96, 3)).astype(np.uint8)
    cv2.imwrite(str(tmp_path / "a.png"), img)
    assert estimate.main([str(tmp_path / "a.png"), str(tmp_path / "a.png"), "--no-refine",
                          "-o", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "model: the shipped model" in err and "constant depth" in err  # says which model, and how
    summary = json.loads((tmp_path / "o" / "homography.json").read_text())
    assert summary["method"] == "camflow_net" and summary["refined"] is False
    assert estimate.main([str(tmp_path / "nope.png"), str(tmp_path / "a.png"), "--method", "dis",
                          "-o", str(tmp_path / "o")]) == 2
    assert "image not found" in capsys.readouterr().err


# ----------------------------------------------------------------------------- rotation maths
class _ClassicalPredictor(Predictor):
    """The Predictor's orientation handling around a classical landscape-only estimator."""

    refine_config = None  # the network's answer only (no test-time refinement)
    height, width = 128, 256  # the network's aspect ratio (Predictor.check_aspect)

    def __init__(self):  # no network: only the rotation path is under test
        self.num_depth = 0
        self._warned_no_depth = False
        self.seen_shapes = []

    def _predict_landscape(self, img1, img2, depth1, depth2, K, *_refinement):
        assert img1.shape[0] <= img1.shape[1], "the backend must only see landscape images"
        self.seen_shapes.append(img1.shape)
        h, w = img1.shape[:2]
        m = registry.get("sift_magsac")(img1, img2)
        flow_f, flow_b, H = m.flow_f, m.flow_b, m.homography
        zeros = np.zeros((h, w, 1), np.float32)
        return {"flow_f": flow_f, "flow_b": flow_b, "logvar_f": zeros, "logvar_b": zeros,
                "coeffs_f": np.zeros(1), "coeffs_b": np.zeros(1), "homography": H}


def test_portrait_rotation_against_known_homography():
    rng = np.random.default_rng(7)
    h, w = 256, 144  # portrait
    img1, img2, H = fx.make_pair(rng, h, w, jitter=8.0)
    pred = _ClassicalPredictor()
    out = pred(img1, img2)
    assert out["rotated"] and pred.seen_shapes == [(w, h, 3)]
    assert out["flow_f"].shape == (h, w, 2)
    # Vectors must come back in the portrait frame: a sign or axis slip costs pixels here.
    assert _interior_epe(out["flow_f"], fx.homography_flow(H, h, w)) < 0.3
    assert _interior_epe(out["flow_b"], fx.homography_flow(np.linalg.inv(H), h, w)) < 0.3
    Hn = out["homography"] / out["homography"][2, 2]
    assert _interior_epe(fx.homography_flow(Hn, h, w), fx.homography_flow(H, h, w)) < 0.3


class _RecordingPredictor(Predictor):
    """No network: records the images the backend would see (the input checks are under test)."""

    refine_config = None
    height, width = 64, 128

    def __init__(self):
        self.num_depth = 0
        self._warned_no_depth = False
        self.seen = []

    def _predict_landscape(self, img1, img2, *_rest):
        self.seen.append((img1, img2))
        z = np.zeros(img1.shape[:2] + (2,), np.float32)
        return {"flow_f": z, "flow_b": z, "coeffs_f": np.zeros(1), "coeffs_b": np.zeros(1),
                "homography": np.eye(3)}


@pytest.mark.parametrize("make, needle", [
    (lambda u: u / 255.0, "img1 is a float image with values in [0, 1] (max 1); float images are "
                          "read as 0..255: multiply it by 255 first"),
    (lambda u: (u.astype(np.int16) - 128).astype(np.int8), "img1 is a signed int8 image with "
                                                           "negative values (min -128)"),
    (lambda u: u.astype(np.int32) - 3, "img1 is a signed int32 image with negative values (min -3)"),
    (lambda u: u * 257.0, "img1 is a float image with values in [0, 65535]; float images must be in 0..255"),
    (lambda u: u - 20.0, "img1 is a float image with values in [-20, 235]"),
])
def test_predictor_refuses_images_on_another_scale(make, needle):
    """Issue 44: [0, 1] float images were read as 0..255 (almost black) and int8 images with
    negative values were accepted; both are ValueErrors naming the argument now."""
    u = np.random.default_rng(0).integers(0, 256, (32, 64, 3)).astype(np.uint8)
    u[0, 0], u[0, 1] = 0, 255
    pred = _RecordingPredictor()
    with pytest.raises(ValueError, match=re.escape(needle)):
        pred(make(u), u)
    with pytest.raises(ValueError, match="img2 is a"):
        pred(u, make(u))
    assert pred.seen == []


def test_predictor_accepts_images_in_0_255():
    """What the refusals point to is accepted and reaches the network unchanged: float in
    0..255 (the [0, 1] image times 255), non-negative int8/int16, an all-black float image."""
    u = np.random.default_rng(1).integers(0, 128, (32, 64, 3)).astype(np.uint8)
    v = np.roll(u, 3, axis=1)
    pred = _RecordingPredictor()
    for a, b in ((u / 255.0 * 255.0, v.astype(np.float32)), (u.astype(np.int8), v.astype(np.int16)),
                 (np.zeros(u.shape), v), (u.astype(np.float32) + 0.5, v)):
        pred(a, b)
        np.testing.assert_array_equal(pred.seen[-1][0], a)
        np.testing.assert_array_equal(pred.seen[-1][1], b)
    np.testing.assert_allclose(pred.seen[0][0], u, atol=1e-9)


# ----------------------------------------------------------------------------- real network
def _random_variables(model, h, w, n_bases, seed=0):
    """Random weights of the right structure; ``jax.eval_shape`` avoids a slow eager init."""
    g = jnp.zeros((1, h, w, 1))
    shapes = jax.eval_shape(lambda k: model.init(k, g, g, jnp.zeros((n_bases, h, w, 2)), train=False),
                            jax.random.key(seed))
    rng = np.random.default_rng(seed)

    def fill(path, s):
        name = jax.tree_util.keystr(path)
        if "batch_stats" in name:
            return np.ones(s.shape, s.dtype) if "var" in name else np.zeros(s.shape, s.dtype)
        return (rng.normal(size=s.shape) * 0.05).astype(s.dtype)

    return jax.tree_util.tree_map_with_path(fill, shapes)


@pytest.fixture(scope="module")
def camflow_plus(tmp_path_factory):
    """A random-weight CamFlow+ (36 bases, reduced width) saved and reloaded as a checkpoint."""
    from camflow_jax.models import build_model

    cfg = {"group_sizes": [12, 12, 12], "height": 64, "width": 128, "embed_dim": 8,
           "depths": [1, 1, 1], "num_heads": [1, 1, 1]}
    model = build_model(cfg)
    variables = _random_variables(model, 64, 128, 36)
    path = tmp_path_factory.mktemp("ckpt") / "camflow_plus"
    checkpoint.save_model(path, cfg, variables)
    return path, Predictor.from_checkpoint(path)


def test_predictor_random_model_landscape_portrait_depth(camflow_plus):
    _, pred = camflow_plus
    assert pred.num_depth == 12 and (pred.height, pred.width) == (64, 128)
    rng = np.random.default_rng(3)
    h, w = 90, 160
    img1, img2 = rng.integers(0, 256, (2, h, w, 3), dtype=np.uint8)
    depth = rng.uniform(1.0, 10.0, (h, w)).astype(np.float32)
    depth[0, :5] = np.nan  # invalid depth must not leak NaN
    # refine=False: the network's outputs (the refinement has its own tests)
    out = pred(img1, img2, depth, depth * 1.1, intrinsics=(150.0, 150.0, 80.0, 45.0), refine=False,
               confidence=True)
    for k in ("flow_f", "flow_b"):
        assert out[k].shape == (h, w, 2) and np.all(np.isfinite(out[k]))
    assert out["logvar_f"].shape == (h, w, 1) and np.all(out["logvar_f"] >= 0)
    assert out["coeffs_f"].shape == (36,) and out["homography"].shape == (3, 3)
    assert np.all(np.isfinite(out["homography"])) and not out["rotated"]
    # Portrait input (same pixels transposed): flows at the portrait input resolution.
    with pytest.warns(UserWarning, match="no depth"):
        port = pred(img1.transpose(1, 0, 2), img2.transpose(1, 0, 2), refine=False, confidence=True)
    assert port["rotated"] and port["flow_f"].shape == (w, h, 2)
    assert np.all(np.isfinite(port["flow_f"])) and port["logvar_b"].shape == (w, h, 1)
    with pytest.raises(ValueError, match="same size"):
        pred(img1, img2[:-1])
    with pytest.raises(ValueError, match="aligned with its image"):
        pred(img1, img2, depth[:-1], depth[:-1])
    with pytest.raises(ValueError, match="NaN"):
        pred(np.full((h, w, 3), np.nan), img2)


def test_estimate_cli_with_checkpoint(camflow_plus, tmp_path, monkeypatch):
    path, pred = camflow_plus
    # Reuse the already compiled predictor (the CLI would otherwise load and compile again).
    monkeypatch.setattr(Predictor, "from_checkpoint", classmethod(lambda cls, p, **kw: pred))
    # The random-weight model's answer does not explain the pair, so the "no motion fits" check
    # would replace it by the identity (no confidence map); this test is about the CLI's plumbing.
    monkeypatch.setattr(plausibility, "no_motion_fits", lambda *a, **k: None)
    rng = np.random.default_rng(4)
    img = rng.integers(0, 256, (90, 160, 3), dtype=np.uint8)
    cv2.imwrite(str(tmp_path / "a.png"), img)
    cv2.imwrite(str(tmp_path / "b.png"), np.roll(img, 2, axis=1))
    np.save(tmp_path / "d1.npy", np.full((90, 160), 3.0, np.float32))
    np.save(tmp_path / "d2.npy", np.full((90, 160), 3.0, np.float32))
    rc = estimate.main([str(tmp_path / "a.png"), str(tmp_path / "b.png"), "--checkpoint", str(path), "--no-refine",
                        "--depth1", str(tmp_path / "d1.npy"), "--depth2", str(tmp_path / "d2.npy"),
                        "--intrinsics", "150,150,80,45", "-o", str(tmp_path / "o")])
    assert rc == 0
    assert np.load(tmp_path / "o" / "flow_f.npy").shape == (90, 160, 2)
    assert (tmp_path / "o" / "confidence_f.png").is_file()
    assert json.loads((tmp_path / "o" / "homography.json").read_text())["method"] == "camflow_net"


def test_evaluate_camflow_method_with_depth_files(camflow_plus, tmp_path, monkeypatch):
    from camflow_jax import evaluate as ev

    path, pred = camflow_plus
    monkeypatch.setattr(Predictor, "from_checkpoint", classmethod(lambda cls, p, **kw: pred))
    fx.make_ghof_cam(str(tmp_path / "g.npy"), per_split=1, h=90, w=160)  # compiled shape
    ddir = tmp_path / "depth"
    ddir.mkdir()
    for i in range(5):
        np.savez(ddir / f"{i:05d}.npz", depth1=np.full((45, 80), 2.0 + i, np.float32),
                 depth2=np.full((45, 80), 2.5 + i, np.float32))
    # camflow_net: the depth files reach the network's depth bases (the refined rows have their
    # own tests; refining here would compile the refinement for this model, ~30 s on 2 cores).
    out = ev.evaluate("ghof_cam", "identity,camflow_net", data=tmp_path / "g.npy", checkpoints=str(path),
                      depth_dir=ddir, progress=False, verbose=False)
    res = out["results"]["camflow_net"]
    assert set(res) == {"RE", "FOG", "LL", "RAIN", "SNOW", "AVG"}
    assert all(np.isfinite(res["AVG"][k]) for k in ("epe", "epe_valid", "pme", "psnr", "ssim"))


# ----------------------------------------------------------------------------- trained model
TRAINED = os.environ.get("CAMFLOW_TRAINED_CHECKPOINT")  # default: the shipped model


@pytest.mark.parametrize("h,w", [(160, 288)])
def test_estimate_cli_trained_model_recovers_homography(tmp_path, monkeypatch, h, w):
    """Held-out synthetic RE frames warped by their own camera-motion homography label, so the
    truth is an exact homography with in-distribution motion: the trained network's flow (via the
    CLI, no depth given, --no-refine: the network alone) must be far closer to it than identity
    is. Set
    CAMFLOW_TRAINED_CHECKPOINT to check another model.

    The first CLI call loads the model through ``Predictor.load`` as usual; the later ones get
    that same Predictor back (one process running the CLI four times would otherwise load, trace
    and compile the model four times: each Predictor has its own jitted functions)."""
    from camflow_jax.data.synthetic.scenes import SyntheticScenes

    real_load, loaded = Predictor.load, {}

    def load_once(cls, checkpoint=None, **kwargs):
        key = (checkpoint, tuple(sorted(kwargs.items())))
        if key not in loaded:
            loaded[key] = real_load(checkpoint, **kwargs)
        return loaded[key]

    monkeypatch.setattr(Predictor, "load", classmethod(load_once))
    scenes = SyntheticScenes(seed=4242, num_samples=4, height=h, width=w, categories=("RE",))
    ratios = []
    for i in range(len(scenes)):
        img1, H = scenes[i]["img1"], scenes[i]["homography"].astype(np.float64)
        img2 = cv2.warpPerspective(img1, H, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
        for name, im in (("1.png", img1), ("2.png", img2)):
            cv2.imwrite(str(tmp_path / name), cv2.cvtColor(im, cv2.COLOR_RGB2BGR))
        out = tmp_path / f"o{i}"
        ckpt = ["--checkpoint", TRAINED] if TRAINED else []
        assert estimate.main([str(tmp_path / "1.png"), str(tmp_path / "2.png"), *ckpt, "--no-refine",
                              "-o", str(out)]) == 0
        truth = fx.homography_flow(H, h, w)
        epe = _interior_epe(np.load(out / "flow_f.npy"), truth, margin=h // 16)
        ratios.append((epe, _interior_epe(np.zeros_like(truth), truth, margin=h // 16)))
    assert len(loaded) == 1  # every call asked for the same model
    epe, epe_identity = np.mean(ratios, axis=0)
    print(f"{h}x{w}: model EPE {epe:.3f} px, identity {epe_identity:.3f} px over {len(ratios)} pairs")
    assert epe < 0.6 * epe_identity, (epe, epe_identity)
