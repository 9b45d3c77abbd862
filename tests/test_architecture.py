"""The package's layout holds to the limits docs/architecture.md states (issue: "a layout that
shows the architecture"). The oracle is the source itself, read with :mod:`ast`, and, for the
config's walk, a trace of a real (one-step) training run."""

from pathlib import Path

import pytest

from tools.bench import architecture as arch
from test_train import _losses

ROOT = Path(__file__).resolve().parents[1]
CLIS = {"camflow_jax.train", "camflow_jax.estimate", "camflow_jax.evaluate", "camflow_jax.stabilize",
        "camflow_jax.export.__main__"}


@pytest.fixture(scope="module")
def edges():
    return arch.import_edges()


def test_the_graph_reader_sees_relative_and_function_imports(tmp_path):
    pkg = tmp_path / "camflow_jax"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import a\n")
    (pkg / "sub" / "a.py").write_text("def f():\n    from camflow_jax.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from .a import f\nimport os\n")
    edges = arch.import_edges(pkg)
    got = sorted((e.source, e.target, e.inside_function) for e in edges)
    assert got == [("camflow_jax.sub", "camflow_jax.sub.a", False),
                   ("camflow_jax.sub.a", "camflow_jax.sub.b", True),
                   ("camflow_jax.sub.b", "camflow_jax.sub.a", False)]
    assert arch.import_cycles(edges) == [["camflow_jax.sub.a", "camflow_jax.sub.b"]]


def test_no_import_cycle_counting_imports_inside_functions(edges):
    assert arch.import_cycles(edges) == []


def test_at_most_eight_files_directly_in_the_package():
    files = arch.top_level_files()
    assert len(files) <= 8, files


def test_no_library_file_over_700_lines():
    big = {f: n for f, n in arch.line_counts().items() if n > 700}
    assert not big, big


def test_fewer_than_a_fifth_of_internal_imports_sit_inside_functions(edges):
    inside = [e for e in edges if e.inside_function]
    assert len(inside) < 0.2 * len(edges), (len(inside), len(edges))


def test_imports_point_down_the_layers(edges):
    """Nothing imports a command line; only the command lines import the harness; the library
    never imports the experiments."""
    for e in edges:
        assert e.target not in CLIS, e
        if e.target.startswith("camflow_jax.cli."):
            assert e.source in CLIS or e.source.startswith("camflow_jax.cli"), e
        if e.target.startswith("tools.bench"):
            assert e.source.startswith("tools.bench"), e


@pytest.mark.slow  # profiles a training run's tracing (about 40 s on 2 cores)
def test_a_config_walks_through_at_most_eight_modules(tmp_path, cache, four_steps_one_device):
    """The modules whose functions receive the config (or a part of it) during a training run
    with a held-out evaluation: the session's 4-step reference run (conftest.four_steps_one_device,
    the training tests' tiny net) resumed in this process from its step-2 checkpoint, so steps 3
    and 4 and the evaluation run for real with the reference's programs, read from the session's
    compilation cache instead of compiled again (the walk's profiler roughly doubles the
    Python-side tracing; a compilation would more than double the test)."""
    import shutil

    from camflow_jax.configs import smoke
    from camflow_jax.training import loop

    wd = tmp_path / "wd"
    shutil.copytree(four_steps_one_device, wd)
    shutil.rmtree(wd / "checkpoints" / "4")
    config = smoke.get_config()  # test_train.COMMON + EVAL, num_steps=4: the reference's config
    config.update_from_flattened_dict({"batch_size": 4, "checkpoint_every": 2, "num_steps": 4, "data.num_train": 8,
                                       "data.num_eval": 2, "model.depths": (1,), "model.layer_depth": (1,),
                                       "model.num_heads": (2,), "model.width": 64})
    walk = arch.config_walk(lambda c: loop.train_and_evaluate(c, wd), config)
    assert [r["step"] for r in _losses(wd)] == [1, 2, 3, 4]  # steps 3 and 4 trained here
    assert (wd / "eval_4.json").is_file()
    assert {"camflow_jax.training.loop", "camflow_jax.data.datasets", "camflow_jax.training.heldout"} <= set(walk), walk
    assert len(walk) <= 8, walk
