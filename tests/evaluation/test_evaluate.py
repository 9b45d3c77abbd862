"""End-to-end evaluation on CAHomo- and GHOF-Cam-format fixtures and the synthetic benchmark."""

import csv
import json
import math

import numpy as np
import pytest

import fixtures_benchmarks as fx
from camflow_jax import evaluate as ev
from camflow_jax.data.synthetic import scenes
from camflow_jax.evaluation import methods, protocols


def _zero_flow_pme(points):
    """Independent zero-flow PME of one pair: mean over the first 6 of |p2 - p1|."""
    return sum(math.dist(points[j][0], points[j][1]) for j in range(6)) / 6


def test_cahomo_zero_flow_protocol(tmp_path):
    truth = fx.make_cahomo(str(tmp_path / "cahomo"), pairs_per_video=2)
    out = ev.evaluate("cahomo", "identity,sift_magsac", data=tmp_path / "cahomo",
                      out_dir=tmp_path / "out", progress=False, verbose=False)
    res = out["results"]
    # Definition of the published zero-flow row: per-pair mean of the 6 point distances,
    # per-category mean over pairs, AVG = mean of the 5 category means.
    per_cat = {}
    for t in truth:
        per_cat.setdefault(t["category"], []).append(_zero_flow_pme(t["points"]))
    cat_means = {c: sum(v) / len(v) for c, v in per_cat.items()}
    for c, m in cat_means.items():
        assert res["identity"][c]["pme"] == pytest.approx(m, rel=1e-9)
    assert res["identity"]["AVG"]["pme"] == pytest.approx(sum(cat_means.values()) / 5, rel=1e-9)
    # RE has 4 pairs (two videos) and LT 2: a sample-weighted mean would differ.
    assert out["counts"]["identity"]["RE"]["pme"] == 4
    # SIFT + MAGSAC recovers the fixture's exact homographies: sub-pixel PME.
    assert res["sift_magsac"]["AVG"]["pme"] < 0.5
    assert out["meta"]["fallbacks_to_identity"]["sift_magsac"] == 0
    assert out["meta"]["skipped_pairs_unknown_video"] == 2
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(saved) == {"identity", "sift_magsac"}
    assert list(saved["identity"]) == ["RE", "LT", "LL", "SF", "LF", "AVG"]
    assert saved["identity"]["AVG"]["pme"] == pytest.approx(res["identity"]["AVG"]["pme"])
    rows = list(csv.DictReader(open(tmp_path / "out" / "results.csv")))
    assert {r["method"] for r in rows} == {"identity", "sift_magsac"}
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| identity |" in md and "CAHomo protocol" in md


def test_ghof_cam_metrics_agree_with_numpy(tmp_path):
    items = fx.make_ghof_cam(str(tmp_path / "GHOF-Cam.npy"), per_split=2)
    out = ev.evaluate("ghof_cam", ["identity", "gt_homography"], data=tmp_path / "GHOF-Cam.npy",
                      out_dir=tmp_path / "out", progress=False, verbose=False)
    res = out["results"]
    cats = {"RE": "RE", "Fog": "FOG", "Dark": "LL", "Rain": "RAIN", "SNOW": "SNOW"}
    epe, epe_v, pme = {}, {}, {}
    for it in items:
        c = cats[it["split"]]
        gt, m, homo = it["gt_flow"].astype(float), it["mask"], it["homo_field"].astype(float)
        mag = np.sqrt((gt[..., 0] * m) ** 2 + (gt[..., 1] * m) ** 2)  # identity: |(0 - gt) * m|
        epe.setdefault(c, []).append(mag.sum() / m.size)
        epe_v.setdefault(c, []).append(mag.sum() / m.sum())
        top = homo[: homo.shape[0] // 2]
        pme.setdefault(c, []).append(np.sqrt(top[..., 0] ** 2 + top[..., 1] ** 2).mean())
    for c in cats.values():
        assert res["identity"][c]["epe"] == pytest.approx(np.mean(epe[c]), rel=1e-6)
        assert res["identity"][c]["epe_valid"] == pytest.approx(np.mean(epe_v[c]), rel=1e-6)
        assert res["identity"][c]["pme"] == pytest.approx(np.mean(pme[c]), rel=1e-6)
    assert res["identity"]["AVG"]["epe"] == pytest.approx(np.mean([np.mean(v) for v in epe.values()]), rel=1e-6)
    # The oracle homography field has zero PME and aligns the images far better than identity.
    assert res["gt_homography"]["AVG"]["pme"] == pytest.approx(0.0, abs=1e-9)
    assert res["gt_homography"]["AVG"]["psnr"] > res["identity"]["AVG"]["psnr"] + 3
    assert res["gt_homography"]["AVG"]["ssim"] > res["identity"]["AVG"]["ssim"]
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(saved["identity"]["AVG"]) == {"epe", "epe_valid", "pme", "psnr", "ssim"}


def test_synthetic_benchmark_end_to_end(tmp_path):
    out = ev.evaluate("synthetic", "identity,gt_homography,dis", num=5, seed=1000, size=(64, 128),
                      out_dir=tmp_path / "syn", progress=False, verbose=False)
    res = out["results"]
    src = scenes.SyntheticScenes(seed=1000, num_samples=5, height=64, width=128)
    per = {}
    for i in range(5):
        s = src[i]
        v = s["valid_f"]
        mag = np.hypot(s["flow_f"][..., 0], s["flow_f"][..., 1])
        per[s["category"]] = ((mag * v).mean(), (mag * v).sum() / v.sum(),
                              np.linalg.norm(s["points2"] - s["points1"], axis=-1).mean())
    for c, (e_all, e_valid, pme) in per.items():  # one sample per category
        assert res["identity"][c]["epe"] == pytest.approx(e_all, rel=1e-5)
        assert res["identity"][c]["epe_valid"] == pytest.approx(e_valid, rel=1e-5)
        assert res["identity"][c]["pme"] == pytest.approx(pme, rel=1e-5)
    assert res["gt_homography"]["AVG"]["epe_valid"] < res["identity"]["AVG"]["epe_valid"]
    meta = json.loads((tmp_path / "syn" / "meta.json").read_text())
    assert meta["num_samples"] == 5 and meta["seed"] == 1000
    assert set(meta["samples_per_category"].values()) == {1}


def test_eval_options_and_keywords_give_the_same_run(tmp_path):
    """``evaluate`` takes an :class:`EvalOptions`; keywords still work and replace its fields."""
    from camflow_jax.evaluation.benchmark import EvalOptions, evaluate

    opts = EvalOptions(num=2, size=(64, 128), progress=False, verbose=False)
    by_options = evaluate("synthetic", "identity", opts)
    by_keywords = evaluate("synthetic", "identity", num=2, size=(64, 128), progress=False, verbose=False)
    assert by_options["results"] == by_keywords["results"]
    replaced = evaluate("synthetic", "identity", opts, out_dir=tmp_path / "o")
    assert replaced["results"] == by_options["results"] and (tmp_path / "o" / "results.json").is_file()
    with pytest.raises(TypeError, match="nmu"):
        evaluate("synthetic", "identity", opts, nmu=3)


def test_batched_methods_give_the_rows_of_one_pair_at_a_time(monkeypatch):
    """A method whose estimator gathers batches (camflow on an accelerator) runs ``run_many`` on
    chunks of samples; the tables and the per-sample rows, in order, are those of one sample at a
    time (the identity estimator made to batch by 2, beside DIS at 1: chunks of 2, 2, 1)."""
    from camflow_jax.estimators import registry

    kw = dict(num=5, seed=1000, size=(64, 128), progress=False, verbose=False)
    one = ev.evaluate("synthetic", "identity,dis", **kw)
    monkeypatch.setattr(type(registry.get("identity")), "batch_size", 2, raising=False)
    calls = []
    many = registry.Estimator.estimate_many
    monkeypatch.setattr(registry.Estimator, "estimate_many",
                        lambda self, pairs, **k: calls.append(len(pairs)) or many(self, pairs, **k))
    two = ev.evaluate("synthetic", "identity,dis", **kw)
    assert calls == [2, 2]  # the last chunk of one sample goes through the single call
    order = lambda out: [(r["index"], r["method"]) for r in out["per_sample"]]  # noqa: E731
    assert order(two) == order(one)
    for a, b in zip(one["per_sample"], two["per_sample"]):
        assert a["values"] == pytest.approx(b["values"], rel=1e-6)
    assert one["results"] == two["results"]


def test_cli_errors_are_clear(tmp_path, capsys):
    assert ev.main(["--dataset=cahomo", f"--data={tmp_path / 'missing'}", "--no_progress"]) == 2
    assert "CAHomo folder not found" in capsys.readouterr().err
    fx.make_cahomo(str(tmp_path / "c"), pairs_per_video=1)
    assert ev.main(["--dataset=cahomo", f"--data={tmp_path / 'c'}", "--methods=camflow:b8", "--no_progress"]) == 2
    assert "--checkpoint=b8=DIR" in capsys.readouterr().err
    assert ev.main(["--dataset=cahomo", f"--data={tmp_path / 'c'}", "--methods=bogus", "--no_progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown estimator 'bogus'") and "gt_homography" in err
    with pytest.raises(ValueError, match="distinct"):
        methods.parse_checkpoints("a=x,a=y")
    assert methods.parse_checkpoints("b8=/c/8, /c/b24/") == [("b8", "/c/8"), ("b24", "/c/b24/")]


def test_malformed_or_unused_checkpoint_entries_are_refused(tmp_path, capsys):
    """Issue 44: in ``--checkpoint a=DIR,b`` the entry ``b`` (no such checkpoint) was ignored
    silently; every entry must be well formed and exist, and some method must use them."""
    fx.make_cahomo(str(tmp_path / "c"), pairs_per_video=1)
    ckpt = tmp_path / "ck"
    ckpt.mkdir()
    base = ["--dataset=cahomo", f"--data={tmp_path / 'c'}", "--no-progress", "--num=1",
            f"--out={tmp_path / 'o'}"]

    def refused(spec, methods_, *expect):
        assert ev.main(base + [f"--methods={methods_}", f"--checkpoint={spec}"]) == 2
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
        for e in expect:
            assert e in lines[0], lines[0]
        assert not (tmp_path / "o").exists()

    for m in ("identity", "camflow:a"):
        refused(f"a={ckpt},b", m, "--checkpoint entry 'b': no checkpoint at 'b'")
    refused(f"={ckpt}", "camflow", f"--checkpoint entry '={ckpt}' is malformed")
    refused("a=", "camflow", "--checkpoint entry 'a=' is malformed")
    refused(f"{ckpt}", "identity,sift_ransac", "checkpoints ['ck'] (--checkpoint) are used by no method")
    # the library's own spelling check (no file system) and an unused checkpoint there too
    with pytest.raises(ValueError, match="entry 'x=' is malformed"):
        methods.parse_checkpoints("a=/c/8,x=")
    with pytest.raises(ValueError, match=r"checkpoints \['a', 'b'\] \(--checkpoint\) are used by no method"):
        methods.build_methods(["identity", "gt_homography"], "cahomo", f"a={ckpt},b={ckpt}")


def test_cli_runs_and_prints_table(tmp_path, capsys):
    fx.make_cahomo(str(tmp_path / "c"), pairs_per_video=1)
    rc = ev.main(["--dataset=cahomo", f"--data={tmp_path / 'c'}", "--methods=identity,orb_ransac",
                  f"--out={tmp_path / 'o'}", "--no_progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "AVG" in text and "orb_ransac" in text
    assert (tmp_path / "o" / "per_sample.csv").is_file()


def test_ghof_benchmark_files(tmp_path):
    items = fx.make_ghof_benchmark(str(tmp_path / "GHOF_Clean_t.npy"), clean=True)
    out = ev.evaluate("ghof", "identity,gyro,gt_homography", data=tmp_path / "GHOF_Clean_t.npy",
                      progress=False, verbose=False)
    res = out["results"]
    for it, cat in zip(items, ("RE", "FOG", "LL", "RAIN", "SNOW")):
        gt = it["gt_flow"].astype(float)
        assert res["identity"][cat]["epe"] == pytest.approx(np.hypot(gt[..., 0], gt[..., 1]).mean(), rel=1e-6)
    assert res["gt_homography"]["AVG"]["pme"] == pytest.approx(0.0, abs=1e-9)
    assert res["gyro"]["AVG"]["epe"] > 0
    fx.make_ghof_benchmark(str(tmp_path / "GHOF_Final_t.npy"), clean=False)
    final = ev.evaluate("ghof", "identity", data=tmp_path / "GHOF_Final_t.npy", progress=False, verbose=False)
    assert set(final["results"]["identity"]["AVG"]) == {"epe"}  # no homo_field -> no PME


def test_camflow_rows_come_from_the_registry(monkeypatch):
    """camflow -> a refined and a network-alone row per checkpoint, built by registry.get;
    each checkpoint is loaded once and shared by its two rows."""
    from types import SimpleNamespace

    from camflow_jax.estimators import registry
    asked = []

    def fake_get(name, **options):
        asked.append((name, options.get("predictor")))
        return SimpleNamespace(predictor=options.get("predictor") or f"model of {name}")

    monkeypatch.setattr(registry, "get", fake_get)
    ms = methods.build_methods(["identity", "camflow"], "synthetic", "b8=/x/8,b36=/x/36")
    assert [m.name for m in ms] == ["identity", "camflow:b8", "camflow_net:b8", "camflow:b36", "camflow_net:b36"]
    assert asked == [("identity", None), ("camflow:/x/8", None), ("camflow_net", "model of camflow:/x/8"),
                     ("camflow:/x/36", None), ("camflow_net", "model of camflow:/x/36")]
    asked.clear()
    assert [m.name for m in methods.build_methods(["camflow_net:b36"], "synthetic", "b8=/x/8,b36=/x/36")] \
        == ["camflow_net:b36"]
    assert asked == [("camflow_net:/x/36", None)]
    assert [m.name for m in methods.build_methods(["camflow"], "synthetic", "/x/only")] == ["camflow", "camflow_net"]
    assert [m.name for m in methods.build_methods(["camflow"], "synthetic")] == ["camflow", "camflow_net"]
    assert asked[-2:] == [("camflow", None), ("camflow_net", "model of camflow")]
    with pytest.raises(ValueError, match="twice"):
        methods.build_methods(["camflow", "camflow_net"], "synthetic")
    with pytest.raises(ValueError, match="no checkpoint labelled 'b9'"):
        methods.build_methods(["camflow:b9"], "synthetic", "b8=/x/8")
    # an old name keeps working, with its note; the row carries the registry name
    (m,) = methods.build_methods(["sift"], "cahomo")
    assert m.name == "sift_ransac" and "sift_ransac" in m.note


def test_backward_flow_for_cahomo_from_the_estimator():
    """flow_b: the estimator's own, else its inverse homography, else the swapped pair."""
    from camflow_jax.estimators.registry import Motion

    h, w = 6, 8
    H = np.array([[1.0, 0, 2.0], [0, 1.0, -1.0], [0, 0, 1.0]])
    sample = {"img1": np.zeros((h, w, 3), np.uint8), "img2": np.ones((h, w, 3), np.uint8)}
    shift = np.broadcast_to(np.float32([2.0, -1.0]), (h, w, 2)).copy()

    def with_h(a, b, **kw):
        return Motion(flow_f=shift, homography=H)

    _, flow_b, info = methods.from_estimator("h", with_h)(sample, True)
    np.testing.assert_allclose(flow_b, -shift, atol=1e-6)
    assert info == {"fallback": False}
    swapped = []

    def dense(a, b, **kw):
        swapped.append(int(a[0, 0, 0]))
        return Motion(flow_f=shift * (1 if a[0, 0, 0] == 0 else -3), fallback=True)

    flow_f, flow_b, info = methods.from_estimator("d", dense)(sample, True)
    assert swapped == [0, 1] and info == {"fallback": True}
    np.testing.assert_allclose(flow_b, -3 * shift)
    assert methods.from_estimator("d", dense)(sample, False)[1] is None


def test_published_identity_check():
    ref = {"RE": 7.75, "LT": 7.65, "LL": 7.21, "SF": 7.53, "LF": 3.39, "AVG": 6.70}
    close = {c: {"pme": v + 0.004} for c, v in ref.items()}
    assert protocols.check_published_identity("cahomo", close) == {"pme": {"match": True, "max_abs_diff": pytest.approx(0.004)}}
    off = dict(close, LF={"pme": 3.50})
    assert not protocols.check_published_identity("cahomo", off)["pme"]["match"]
    assert protocols.check_published_identity("synthetic", close) == {}


def test_dataset_registry_refuses_unknown_and_missing_data():
    from camflow_jax.data import datasets
    assert datasets.DATASETS == ("ghof_cam", "ghof", "cahomo", "synthetic")
    with pytest.raises(ValueError, match="unknown dataset 'nope'"):
        datasets.load_dataset("nope")
    with pytest.raises(ValueError, match="--data is required"):
        datasets.load_dataset("ghof")
    src = datasets.load_dataset("synthetic", num=2, size=(64, 128))
    assert len(src) == 2 and datasets.categories(src) == scenes.CATEGORIES


def test_one_json_writer_marks_or_refuses_non_finite_values(tmp_path):
    from camflow_jax.evaluation import reports
    from camflow_jax.io import atomic

    obj = {"a": np.float32(1.5), "b": [np.int64(2), float("nan")], 3: (np.inf, -np.inf), "c": np.arange(2),
           "d": np.bool_(True)}
    text = atomic.strict_json(obj, nonfinite="mark")
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == \
        {"a": 1.5, "b": [2, None], "3": ["inf", "-inf"], "c": [0, 1], "d": True}
    with pytest.raises(ValueError, match="NaN or infinite"):
        atomic.strict_json(obj)
    reports.write_json(tmp_path / "r.json", obj)
    assert (tmp_path / "r.json").read_text() == atomic.strict_json(obj, nonfinite="mark", indent=2)


def test_no_refine_keeps_only_the_network_rows(monkeypatch, capsys):
    """--no-refine turns every camflow method into its network-only twin before evaluating."""
    seen = {}

    def fake_evaluate(dataset, methods, **kw):
        seen["methods"] = methods
        raise ValueError("stop here")

    monkeypatch.setattr(ev, "evaluate", fake_evaluate)
    assert ev.main(["--dataset=synthetic", "--methods=identity,camflow,camflow:b8", "--no-refine"]) == 2
    assert seen["methods"] == "identity,camflow_net,camflow_net:b8"
    assert "stop here" in capsys.readouterr().err


def test_refine_size_reaches_the_refined_rows(monkeypatch, capsys):
    """--refine-size N: evaluate() gets it, and the refined camflow row asks its predictor for
    RefineConfig.at_size(N) while the network-only row does not refine; with --no-refine, or
    without a refined row, it is refused in one line."""
    from camflow_jax.evaluation import methods as methods_lib
    from camflow_jax.predictor import Predictor
    from camflow_jax.refine import RefineConfig

    seen = {}

    def fake_evaluate(dataset, methods, **kw):
        seen.update(kw)
        raise ValueError("stop here")

    monkeypatch.setattr(ev, "evaluate", fake_evaluate)
    assert ev.main(["--dataset=synthetic", "--methods=camflow", "--refine-size=576"]) == 2
    assert seen["refine_size"] == 576 and "stop here" in capsys.readouterr().err
    assert ev.main(["--dataset=synthetic", "--methods=camflow", "--refine-size=576", "--no-refine"]) == 2
    assert "do not also give --no-refine" in capsys.readouterr().err
    assert ev.main(["--dataset=synthetic", "--methods=camflow", "--refine-size=100"]) == 2
    assert "at least 288" in capsys.readouterr().err

    class Fake:
        description, num_depth = "fake", 0

    monkeypatch.setattr(Predictor, "load", classmethod(lambda cls, *a, **k: Fake()))
    rows = {m.name: m for m in methods_lib.build_methods(["camflow"], "synthetic", refine_size=576)}
    assert set(rows) == {"camflow", "camflow_net"}
    refines = {name: m.estimator.refine for name, m in rows.items()}
    assert refines == {"camflow": RefineConfig.at_size(576), "camflow_net": False}
    with pytest.raises(ValueError, match="needs a refined camflow method"):
        methods_lib.build_methods(["sift_magsac", "camflow_net"], "synthetic", refine_size=576)
