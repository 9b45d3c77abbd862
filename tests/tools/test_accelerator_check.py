"""The accelerator check's plan and runner (tools/accelerator_check.py), on the CPU: every
benchmark command names only flags the benchmark has, and the runner reports what each step
did (ok, failed, timed out, skipped for the budget), keeps each step's output in the log and the
benchmark JSONs in the report, and fits a training slice into what the budget leaves."""

import dataclasses
import json
import sys

import pytest

from helpers import ROOT
from tools.bench import accelerator_check as check
from tools.bench.benchmarking import BenchmarkOptions

#: Tests of measurement code (tools/bench): the slow tier (python -m pytest -q -m slow tests).
pytestmark = pytest.mark.slow


def test_the_plan_names_only_benchmark_options_and_the_readme_training_command(tmp_path):
    steps = check.plan(tmp_path, release_code="/nowhere", torch_available=True)
    fields = {f.name for f in dataclasses.fields(BenchmarkOptions)}
    names = [s.name for s in steps]
    assert names == list(check.STEP_NAMES) and "release" in names
    for s in steps:
        if s.json is None:
            continue
        flags = [a[2:].replace("-", "_") for a in s.argv if a.startswith("--")]
        assert set(flags) <= fields | {"render", "compile_cache"}, (s.name, set(flags) - fields)
        assert s.argv[s.argv.index("--out") + 1] == s.json
    slice_ = steps[names.index("train_slice")]
    assert slice_.argv[1:4] == ("-m", "camflow_jax.train", "--config=configs/pretrained.py")
    assert "release" not in [s.name for s in check.plan(tmp_path)]  # no torch, no release step
    picked = check.plan(tmp_path, steps=("train_slice", "tests"), workdir=tmp_path / "wd", size=(64, 128), batch=2)
    assert [s.name for s in picked] == ["train_slice", "tests"]
    missing = [f for f in check.TEST_FILES if not (ROOT / f).is_file()]  # tests moved: the step names them anew
    assert not missing and set(check.TEST_FILES) <= set(picked[1].argv), missing
    assert f"--workdir={tmp_path / 'wd'}" in picked[0].argv
    # the export reads the slice's workdir and writes what a lease brings back into out
    picked = check.plan(tmp_path / "out", steps=("train_slice", "export"), workdir=tmp_path / "wd",
                        config="configs/smoke.py", init_from="weights/earlier", overrides=("model.precision=bfloat16",))
    slice_, export = picked
    assert "--config=configs/smoke.py" in slice_.argv and "--config.init_from=weights/earlier" in slice_.argv
    assert "--config.model.precision=bfloat16" in slice_.argv and slice_.argv[-1].startswith("--config.stop_after")
    assert export.argv[2:5] == (str(tmp_path / "wd"), "--out", str(tmp_path / "out" / "weights"))
    assert export.after_slice and export.collect == ((str(tmp_path / "wd" / "metrics.jsonl"), "train_metrics.jsonl"),)
    with pytest.raises(ValueError, match="unknown step"):
        check.plan(tmp_path, steps=("tests", "nope"))
    # every train benchmark names its renderer and precision; all read earlier compilations back
    for s in steps:
        if s.name.startswith("train_") and s.json:
            assert "--render" in s.argv and "--precision" in s.argv and "--compile-cache" in s.argv, s.name


def test_the_runner_reports_each_step_and_keeps_the_budget(tmp_path):
    py = sys.executable
    bench = tmp_path / "bench.json"
    steps = [
        check.Step("ok", (py, "-c", f"import json; open({str(bench)!r}, 'w').write(json.dumps({{'r': 1}}));"
                                    "print('hello')"), 20, str(bench)),
        check.Step("failed", (py, "-c", "import sys; print('boom'); sys.exit(3)"), 20),
        check.Step("slow", (py, "-c", "import time; print('started', flush=True); time.sleep(30)"), 2),
        check.Step("slice", (py, "-c", "import sys; print(sys.argv[1])", "--config.stop_after_seconds=180"),
                   240, slice_s=180),
        check.Step("late", (py, "-c", "print('never')"), 60),
    ]
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    report = check.run_plan(steps, tmp_path / "out", budget_s=90, root=tmp_path)
    got = {s["name"]: s for s in report["steps"]}
    assert [got[n]["status"] for n in ("ok", "failed", "slow")] == ["ok", "failed", "timed out"]
    assert got["ok"]["results"] == {"r": 1} and got["ok"]["tail"] == ["hello"]
    assert got["failed"]["rc"] == 3 and got["slow"]["tail"] == ["started"]
    # the slice shrinks to the budget left less the margin, and runs with that value
    assert got["slice"]["status"] == "ok" and got["slice"]["slice_s"] < 90 - check.SLICE_MARGIN_S + 1
    assert got["slice"]["tail"] == [f"--config.stop_after_seconds={got['slice']['slice_s']:g}"]
    assert got["late"]["status"] in ("ok", "skipped")
    on_disk = json.loads((tmp_path / "out" / "accelerator_check.json").read_text())
    assert [s["name"] for s in on_disk["steps"]] == [s.name for s in steps]
    log = (tmp_path / "out" / "accelerator_check.log").read_text()
    assert "hello" in log and "boom" in log and "===== slow" in log
    short = check.run_plan(steps[:1] + steps[4:], tmp_path / "short", budget_s=25, root=tmp_path)
    assert [s["status"] for s in short["steps"]] == ["ok", "skipped"]  # 60 s step, < 30 s left


def test_the_slice_leaves_room_for_the_steps_that_read_it_and_their_files_come_back(tmp_path):
    py = sys.executable
    src = tmp_path / "metrics.jsonl"
    src.write_text('{"step": 1}\n')
    steps = [
        check.Step("slice", (py, "-c", "import sys; print(sys.argv[1])", "--config.stop_after_seconds=500"),
                   560, slice_s=500),
        check.Step("export", (py, "-c", "print('exported')"), 50, after_slice=True,
                   collect=((str(src), "train_metrics.jsonl"), (str(tmp_path / "absent"), "absent"))),
    ]
    report = check.run_plan(steps, tmp_path / "out", budget_s=200, root=tmp_path)
    got = {s["name"]: s for s in report["steps"]}
    # 200 s of budget, less the margin and the export's 50 s
    assert got["slice"]["slice_s"] <= 200 - check.SLICE_MARGIN_S - 50 and got["slice"]["slice_s"] > 80
    assert got["export"]["status"] == "ok" and got["export"]["collected"] == ["train_metrics.jsonl"]
    assert (tmp_path / "out" / "train_metrics.jsonl").read_text() == src.read_text()
    assert not (tmp_path / "out" / "absent").exists()


def test_a_rehearsal_on_the_cpu_trains_a_slice_and_brings_back_16_bit_weights_and_the_loss_curve(tmp_path):
    """What a lease runs, on the CPU with the smoke config: the slice's weights come back as
    the package's compact format (readable by the Predictor) beside the loss curve."""
    from camflow_jax.models import checkpoint

    out, wd = tmp_path / "out", tmp_path / "wd"
    rc = check.main(["--out", str(out), "--steps", "train_slice,export", "--config", "configs/smoke.py",
                     "--workdir", str(wd), "--train-slice", "60", "--budget", "400"])
    report = json.loads((out / "accelerator_check.json").read_text())
    assert rc == 0, [(s["name"], s["status"], s["tail"][-3:]) for s in report["steps"]]
    assert sorted(p.name for p in (out / "weights").iterdir()) == ["model.json", checkpoint.NPZ_FILE]
    assert checkpoint.read_model_config(out / "weights")["height"] > 0
    lines = (out / "train_metrics.jsonl").read_text().splitlines()
    assert lines and all("step" in json.loads(x) for x in lines)
