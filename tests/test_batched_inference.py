"""Predictor.predict_batch: several pairs per call of the network and of the refinement.

Oracles: the synthetic scenes' ground-truth flow (the refined batch is more accurate than the
network), OpenCV's rotation of the images (a portrait pair in a batch is the landscape pair's
motion, turned), and the single-pair call, which the rest of the suite checks against the
ground truth, OpenCV and the parity fixtures (a batch must not change any pair's result).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from camflow_jax import refine as R
from camflow_jax.data.synthetic.scenes import SyntheticScenes
from camflow_jax.estimators import registry
from camflow_jax.models import checkpoint
from camflow_jax.predictor import BATCH_SIZE, Predictor

H, W = 64, 128
#: a working size below the input and a detail level at it: the default's shape at 320x576
CFG = R.RefineConfig(max_size=W // 2, detail_size=W)


@pytest.fixture(scope="module")
def small():
    """The shipped weights at a 64x128 network size."""
    model, variables, _, cfg = checkpoint.load_model(checkpoint.pretrained_path(checkpoint.PRETRAINED))
    return Predictor(model, variables, None, {**cfg, "height": H, "width": W}, refine=CFG)


@pytest.fixture(scope="module")
def scenes():
    src = SyntheticScenes(seed=1000, num_samples=3, height=H, width=W, categories=("RE",))
    return [src[i] for i in range(3)]


def _cam(s):
    return {"depth1": s["depth1"], "depth2": s["depth2"], "intrinsics": s["K"]}


def _epe(flow, s):
    valid = np.asarray(s["valid_f"]).reshape(H, W) > 0
    return float(np.linalg.norm(flow - s["flow_f"], axis=-1)[valid].mean())


def _batch_args(scenes):
    return dict(images1=[s["img1"] for s in scenes], images2=[s["img2"] for s in scenes],
                depths1=[s["depth1"] for s in scenes], depths2=[s["depth2"] for s in scenes],
                intrinsics=np.stack([s["K"] for s in scenes]))


def _same_result(out, one):
    """The same numbers up to float32 rounding in a different program (vmapped or batched
    arithmetic): a thousandth of a pixel on average, two hundredths at most; the same iterations."""
    for key in ("net_flow_f", "net_flow_b", "flow_f", "flow_b", "weights_f"):
        diff = np.abs(out[key] - one[key])
        assert diff.max() < 2e-2 and diff.mean() < 1e-3, (key, diff.max(), diff.mean())
    np.testing.assert_allclose(out["homography"], one["homography"], rtol=1e-3, atol=1e-3)
    assert out["refine_info"]["iterations"] == one["refine_info"]["iterations"]
    assert out["refine_info"]["improved"] == one["refine_info"]["improved"]


@pytest.mark.slow  # 75 s of compiling on 2 cores; the accelerator's path (the default tier is over budget)
def test_a_refined_batch_is_one_program_with_one_transfer_each_way(small, scenes, monkeypatch):
    two = scenes[:2]  # batch 2: the programs the stabilizer test below reuses
    singles = [small(s["img1"], s["img2"], **_cam(s)) for s in two]
    small.batched_refinement = True  # one program per batch, as on an accelerator
    try:
        # every transfer explicit: the batch goes over in one device_put, back in one device_get
        with jax.transfer_guard("disallow"):
            batched = small.predict_batch(**_batch_args(two))
        # the registry's camflow estimator, as the evaluation runs it (no plausibility checks)
        est = registry.get("camflow", predictor=small)
        assert est.batch_size == BATCH_SIZE
        motions = est.estimate_many([(s["img1"], s["img2"], s["depth1"], s["depth2"], s["K"]) for s in two],
                                    checked=False)
    finally:
        small.batched_refinement = None
    # on a CPU: two pairs a call where there are two cores (their refinements in two threads), else one
    import camflow_jax.predictor as predictor_mod

    for cores, size in ((1, 1), (2, 2), (16, 2)):
        monkeypatch.setattr(predictor_mod, "usable_cpus", lambda cores=cores: cores)
        assert registry.get("camflow", predictor=small).batch_size == size
    for m, many in zip(motions, batched):
        np.testing.assert_array_equal(m.flow_f, many["flow_f"])  # the same program's result
    for s, one, many in zip(two, singles, batched):
        assert many["refined"] and many["refine_info"]["working_size_hw"] == [H // 2, W // 2]
        assert many["refine_info"]["detail_size_hw"] == [H, W]
        assert _epe(many["flow_f"], s) < 0.7 * _epe(many["net_flow_f"], s)
        _same_result(many, one)


@pytest.mark.slow
def test_padded_batches_and_the_cpu_path_give_the_single_call_results(small, scenes):
    singles = [small(s["img1"], s["img2"], **_cam(s)) for s in scenes]
    small.batched_refinement = True
    try:
        padded = small.predict_batch(**_batch_args(scenes), batch_size=4)  # 3 pairs, padded to 4
    finally:
        small.batched_refinement = None
    threaded = small.predict_batch(**_batch_args(scenes), batch_size=2)  # on a CPU: two pairs in two threads, then one
    for one, a, b in zip(singles, padded, threaded):
        _same_result(a, one)
        _same_result(b, one)


@pytest.mark.filterwarnings("ignore:model has depth-translational bases")
def test_a_constant_depth_is_built_once_and_changes_nothing(small, scenes, monkeypatch):
    """Without depth (the stabilizer's usual case), or with a depth holding one value, a depth
    model's bases for that constant depth are built once per size, intrinsics and value, for the
    network and the refinement, and kept. The oracle: the same pair with both caches bypassed,
    so the network builds the depth bases inside its forward and the refinement per call."""
    s = scenes[0]
    # no retry (a second refinement with other starts keeps its own entries): one refinement a call
    monkeypatch.setattr(small, "refine_config", dataclasses.replace(CFG, retry_starts=()))
    K0 = np.array([W, W, (W - 1) / 2, (H - 1) / 2], np.float32)  # the default for a pair without intrinsics
    K1 = np.array([90.0, 95.0, 60.0, 30.0], np.float32)
    for K, value in ((None, None), (K1, None), (K1, 2.5)):
        depth = {} if value is None else {"depth1": np.full((H, W), value), "depth2": np.full((H, W), value)}
        got = [small(s["img1"], s["img2"], intrinsics=K, **depth) for _ in range(2)]
        with monkeypatch.context() as m:
            m.setattr(small.refiner, "_depth_of", lambda d, K, constant, **_: (d, K))
            m.setattr(small, "_forward_bases", lambda args, constant: (small.static_bases, args))
            ones = np.full((H, W), 1.0 if value is None else value, np.float32)
            ref = small(s["img1"], s["img2"], depth1=ones, depth2=ones, intrinsics=K0 if K is None else K)
        for out in got:
            np.testing.assert_allclose(out["net_flow_f"], ref["net_flow_f"], atol=1e-4)
            _same_result(out, ref)
        depths = {} if value is None else {"depths1": [depth["depth1"]] * 2, "depths2": [depth["depth2"]] * 2}
        batch = small.predict_batch([s["img1"]] * 2, [s["img2"]] * 2, **depths, intrinsics=K, batch_size=2)
        for out in batch:
            _same_result(out, ref)
    # one entry per size, intrinsics and value, in the network's cache and in the refinement's
    assert len(small._constant_depth_cache) == 3 and len(small.refiner._depth_cache) == 3


def test_mixed_orientations_come_back_in_order(small, scenes):
    rot = lambda a: np.ascontiguousarray(np.rot90(a, k=-1, axes=(0, 1)))  # noqa: E731
    s0 = scenes[0]
    K = np.asarray(s0["K"], np.float64)
    portrait = {"img1": rot(s0["img1"]), "img2": rot(s0["img2"]), "depth1": rot(s0["depth1"]),
                "depth2": rot(s0["depth2"]), "K": (K[1], K[0], H - 1 - K[3], K[2])}
    pairs = [s0, portrait]  # one batch of 2: the portrait pair turned to the landscape size
    out = small.predict_batch([p["img1"] for p in pairs], [p["img2"] for p in pairs],
                              [p["depth1"] for p in pairs], [p["depth2"] for p in pairs],
                              [p["K"] for p in pairs], refine=False)
    assert [o["flow_f"].shape for o in out] == [(H, W, 2), (W, H, 2)]
    assert [o["rotated"] for o in out] == [False, True] and not any(o["refined"] for o in out)
    back = np.rot90(out[1]["flow_f"], k=1, axes=(0, 1))
    back = np.stack([back[..., 1], -back[..., 0]], -1)  # vectors turned back with the grid
    assert np.abs(back - out[0]["flow_f"])[4:-4, 4:-4].mean() < 0.05
    assert _epe(out[0]["flow_f"], s0) < 0.7 * _epe(np.zeros_like(out[0]["flow_f"]), s0)  # the network alone


def test_forward_only_gives_the_two_direction_calls_forward_results(small, scenes):
    """``forward_only=True`` (the stabilizer's call): the network's and the refinement's
    forward results of the two-direction call (which the parity fixtures and the ground truth
    check) and nothing of the backward direction; the refined flow is still closer to the
    scene's ground truth than the network's. (The two-direction call may also refine a pair again
    when its directions disagree in part of the image, which a forward-only call cannot see.)"""
    s = scenes[0]
    # the retry (RefineConfig.retry_starts) needs both directions: off here, so that the two calls refine alike
    cfg = dataclasses.replace(CFG, retry_starts=())
    both = small(s["img1"], s["img2"], **_cam(s), refine=cfg)
    one = small(s["img1"], s["img2"], **_cam(s), forward_only=True, refine=cfg)
    assert not any(k.endswith("_b") for k in one), sorted(one)
    assert np.abs(one["net_flow_f"] - both["net_flow_f"]).max() < 1e-4
    for key in ("flow_f", "weights_f"):  # float32 rounding, carried through the iterations
        diff = np.abs(one[key] - both[key])
        assert diff.max() < 2e-2 and diff.mean() < 1e-3, (key, diff.max(), diff.mean())
    np.testing.assert_allclose(one["homography"], both["homography"], rtol=1e-3, atol=1e-3)
    assert one["refine_info"]["iterations"] == both["refine_info"]["iterations"][:1]
    assert _epe(one["flow_f"], s) < _epe(one["net_flow_f"], s)
    # predict_batch on the CPU path, a pair at a time: the same
    (b,) = small.predict_batch([s["img1"]], [s["img2"]], depths1=[s["depth1"]], depths2=[s["depth2"]],
                               intrinsics=s["K"], forward_only=True, batch_size=1)
    assert not any(k.endswith("_b") for k in b) and np.abs(b["flow_f"] - one["flow_f"]).max() < 2e-2


@pytest.mark.slow  # compiles the forward-only batched refinement (the accelerator's path)
def test_forward_only_in_a_batched_refinement(small, scenes):
    two = scenes[:2]
    singles = [small(s["img1"], s["img2"], **_cam(s), forward_only=True) for s in two]
    small.batched_refinement = True
    try:
        outs = small.predict_batch(**_batch_args(two), forward_only=True)
    finally:
        small.batched_refinement = None
    for out, one in zip(outs, singles):
        assert not any(k.endswith("_b") for k in out), sorted(out)
        for key in ("net_flow_f", "flow_f", "weights_f"):
            diff = np.abs(out[key] - one[key])
            assert diff.max() < 2e-2 and diff.mean() < 1e-3, (key, diff.max(), diff.mean())
        assert out["refine_info"]["iterations"] == one["refine_info"]["iterations"]


@pytest.mark.parametrize("kwargs, words", [
    (dict(images2=[]), "images1 has 1 images and images2 0"),
    (dict(depths1=[np.ones((H, W))]), "give both depths1 and depths2"),
    (dict(intrinsics=np.ones((2, 4))), "intrinsics must be one (fx, fy, cx, cy) or one per pair"),
    (dict(batch_size=0), "batch_size must be at least 1"),
    (dict(images1=[np.zeros((H, W, 3), np.float32) + 0.5]), "images1[0]"),
])
def test_bad_batches_are_refused_naming_the_problem(small, scenes, kwargs, words):
    args = {"images1": [scenes[0]["img1"]], "images2": [scenes[0]["img2"]], **kwargs}
    with pytest.raises(ValueError) as e:
        small.predict_batch(**args)
    assert words in str(e.value)


@pytest.mark.slow  # reuses the batch-2 programs of the refined-batch test above
def test_the_stabilizer_in_batches_measures_what_it_measures_pair_by_pair(small, scenes):
    from camflow_jax.stabilization.estimators import CamFlowEstimator
    from camflow_jax.stabilization.pipeline import StabilizerConfig, estimate_motion

    # float frames, as the other tests' pairs: the same compiled programs
    base = np.clip(np.asarray(scenes[2]["img1"], np.float32), 0, 255)
    frames = [np.roll(base, (t, 2 * t), axis=(0, 1)) for t in range(4)]  # 3 pairs, (1, 2) px apart
    frames[3] = frames[2].copy()  # identical images: answered without the model, inside the batch
    cfg = StabilizerConfig()
    motions, estimators = [], []
    small.batched_refinement = True
    try:
        for batch in (1, 3):  # the model sees 2 pairs of the 3: batch 2
            est = CamFlowEstimator(small)
            est.batch_size = batch
            motions.append(estimate_motion(frames, est, cfg))
            estimators.append(est)
    finally:
        small.batched_refinement = None
    one, four = motions
    assert np.abs(four.flows - one.flows).max() < 2e-2
    assert estimators[1].calls == estimators[0].calls == 3 and estimators[1].failed_pairs == estimators[0].failed_pairs
    assert [c is None for c in estimators[1].coefficients] == [c is None for c in estimators[0].coefficients]
    assert np.abs(one.flows[2]).max() < 1e-6  # the identical pair: zero motion
    assert estimators[1].stats()["failures"] == estimators[0].stats()["failures"]
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        CamFlowEstimator(small).batch_size = 0
