"""The package's layout holds to the limits docs/architecture.md states (issue: "a layout that
shows the architecture"). The oracle is the source itself, read with :mod:`ast`, and, for the
config's walk, a trace of a real (one-step) training run."""

import ast
import warnings

import pytest

from helpers import ROOT, logged_metrics
from tools.bench import architecture

CLIS = {"camflow_jax.train", "camflow_jax.estimate", "camflow_jax.evaluate", "camflow_jax.stabilize", "camflow_jax.adapt",
        "camflow_jax.export.__main__"}
#: The layers: each folder (or file) directly in the package and its rank. An import between two
#: of them must point to a lower rank (same rank: no import either way), so no folder-level
#: cycle can form. Read from the import graph at the move of data/images.py: io is the floor; geometry and the
#: compilation caches stand on it; the bases and the data readers on geometry; the network on
#: the bases; its configs and the refinement on the network; the Predictor on both; the
#: estimators on the Predictor; evaluation and stabilization on the estimators; training, the
#: command-line harness and the export above them; the entry modules on top, and the package's
#: ``__init__`` (which may re-export anything) above all.
FOLDER_RANKS = {
    "io": 0,
    "geometry": 1, "compilation": 1,
    "bases": 2, "data": 2,
    "models": 3,
    "configs": 4, "refine": 4,
    "predictor": 5,
    "estimators": 6,
    "evaluation": 7, "stabilization": 7,
    "training": 8, "cli": 8,
    "export": 9,
    "adaptation": 6,
    "train": 10, "estimate": 10, "evaluate": 10, "stabilize": 10, "adapt": 10,
    "camflow_jax": 11,
}
#: Files over this many lines are reported (a warning, not a failure: split where a concept has a
#: seam, never to fit a number).
LONG_FILE_LINES = 700


def folder_of(module: str) -> str:
    """The package's folder (or top-level file) a module belongs to: ``camflow_jax.io.video`` ->
    ``io``, ``camflow_jax.predictor`` -> ``predictor``, ``camflow_jax`` -> ``camflow_jax``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def folder_edges(edges) -> list:
    """The module graph's edges between different folders, as edges between the folders."""
    return [architecture.ImportEdge(folder_of(e.source), folder_of(e.target), e.line, e.inside_function)
            for e in edges if folder_of(e.source) != folder_of(e.target)]


def upward_imports(edges, ranks) -> list[str]:
    """Each edge between folders that does not point to a lower rank, as 'source:line -> target'."""
    return [f"{e.source}:{e.line} -> {e.target} ({folder_of(e.source)} {ranks[folder_of(e.source)]} -> "
            f"{folder_of(e.target)} {ranks[folder_of(e.target)]})"
            for e in edges if folder_of(e.source) != folder_of(e.target)
            and ranks[folder_of(e.target)] >= ranks[folder_of(e.source)]]


@pytest.fixture(scope="module")
def edges():
    return architecture.import_edges()


def test_the_graph_reader_sees_relative_and_function_imports(tmp_path):
    pkg = tmp_path / "camflow_jax"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import a\n")
    (pkg / "sub" / "a.py").write_text("def f():\n    from camflow_jax.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from .a import f\nimport os\n")
    edges = architecture.import_edges(pkg)
    got = sorted((e.source, e.target, e.inside_function) for e in edges)
    assert got == [("camflow_jax.sub", "camflow_jax.sub.a", False),
                   ("camflow_jax.sub.a", "camflow_jax.sub.b", True),
                   ("camflow_jax.sub.b", "camflow_jax.sub.a", False)]
    assert architecture.import_cycles(edges) == [["camflow_jax.sub.a", "camflow_jax.sub.b"]]


def test_no_import_cycle_counting_imports_inside_functions(edges):
    assert architecture.import_cycles(edges) == []


def test_at_most_eight_files_directly_in_the_package():
    files = architecture.top_level_files()
    assert len(files) <= 8, files


def test_long_files_are_reported_not_refused():
    """A size cap steers toward splitting files to fit a number; long files are only reported."""
    big = {f: n for f, n in architecture.line_counts().items() if n > LONG_FILE_LINES}
    if big:
        warnings.warn(f"files over {LONG_FILE_LINES} lines (split where a concept has a seam): {big}", stacklevel=1)
        print(f"files over {LONG_FILE_LINES} lines: {big}")


def test_every_folder_has_a_rank(edges):
    folders = {folder_of(m) for m in architecture.package_modules()}
    assert folders == set(FOLDER_RANKS), (folders - set(FOLDER_RANKS), set(FOLDER_RANKS) - folders)


def test_no_import_points_up_the_folder_ranks(edges):
    assert upward_imports(edges, FOLDER_RANKS) == []


def test_no_folder_level_cycle(edges):
    assert architecture.import_cycles(folder_edges(edges)) == []


def test_the_layer_checks_catch_an_upward_import_and_a_folder_cycle():
    """The oracle: hand-made edges. io -> data goes up (io is the floor), and with data -> io it
    closes a cycle between the folders although no module cycle exists."""
    up = architecture.ImportEdge("camflow_jax.io.video", "camflow_jax.data.images", 66, False)
    down = architecture.ImportEdge("camflow_jax.data.datasets", "camflow_jax.io.video", 30, False)
    assert upward_imports([down], FOLDER_RANKS) == []
    assert upward_imports([up, down], FOLDER_RANKS) == [
        "camflow_jax.io.video:66 -> camflow_jax.data.images (io 0 -> data 2)"]
    assert architecture.import_cycles([up, down]) == []  # two different modules each way
    assert architecture.import_cycles(folder_edges([up, down])) == [["data", "io"]]
    same = architecture.ImportEdge("camflow_jax.geometry.host", "camflow_jax.compilation.cache", 1, False)
    assert len(upward_imports([same], FOLDER_RANKS)) == 1  # equal ranks import neither way


def test_the_package_never_imports_the_measurements():
    """tools/ (tools.bench: the measurements) is not installed; nothing in the package names it."""
    found = []
    for module, path in architecture.package_modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{module}:{node.lineno} {n}" for n in names if n == "tools" or n.startswith("tools.")]
    assert found == []


#: Module names from before the layout (issue 43; ``git log --name-status -M``), each with the
#: module that holds its concept now. An import aliased to one of them (``from
#: camflow_jax.data.synthetic import scenes as synthetic``) keeps the old name alive: import the
#: module by its own name (issue 61, "one name per concept"). ``video_io`` (stabilization/video_io.py)
#: is not listed: ``io.video as video_io`` only disambiguates ``video``, a path variable everywhere.
OLD_MODULE_NAMES = {
    "accel": "tools.bench.accel", "baselines": "camflow_jax.geometry.classical",
    "benchmark": "tools.bench.stabilization (was stabilization/benchmark.py)",
    "benchmarking": "tools.bench.benchmarking", "cli_utils": "camflow_jax.cli.harness",
    "compile_cache": "camflow_jax.compilation.cache", "estimation": "camflow_jax.estimators.outputs",
    "estimators": "camflow_jax.estimators.registry", "experiments": "tools.bench",
    "flowio": "camflow_jax.io.flo", "geometry": "camflow_jax.geometry.device",
    "geometry_np": "camflow_jax.geometry.host", "metric_clips": "tools.bench.metric_clips",
    "synthetic": "camflow_jax.data.synthetic.scenes", "synthetic_appearance": "camflow_jax.data.synthetic.appearance",
    "synthetic_files": "camflow_jax.data.synthetic.files", "synthetic_render": "camflow_jax.data.synthetic.render",
    "synthetic_textures": "camflow_jax.data.synthetic.textures", "train_sources": "camflow_jax.data.sources",
    "train_signals": "camflow_jax.training.signals", "train_state": "camflow_jax.training.state",
    "train_steps": "camflow_jax.training.steps", "trainer": "camflow_jax.training.loop",
}


def project_module_names() -> set[str]:
    """The names of the package's and tools/'s modules and packages (``video``, ``scenes``, ``bench``)."""
    names = set()
    for path in [*(ROOT / "camflow_jax").rglob("*.py"), *(ROOT / "tools").rglob("*.py")]:
        names.add(path.parent.name if path.stem in ("__init__", "__main__") else path.stem)
    return names


def misleading_aliases(sources: dict[str, str], module_names: set[str]) -> list[str]:
    """Each ``import ... as Y`` of the project's own code (``camflow_jax``, ``tools``, relative)
    whose ``Y`` names another module than the one imported: a pre-layout module name
    (:data:`OLD_MODULE_NAMES`) or the name of another of the project's modules or packages
    (``adaptation.run as adaptation``). ``sources``: path -> text. As 'path:line name as Y'."""
    found = []
    for path, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom):
                ours = node.level > 0 or (node.module or "").split(".")[0] in ("camflow_jax", "tools")
                pairs = [(a.name, a.asname) for a in node.names]
            elif isinstance(node, ast.Import):
                ours = True
                pairs = [(a.name, a.asname) for a in node.names if a.name.split(".")[0] in ("camflow_jax", "tools")]
            else:
                continue
            for name, alias in pairs:
                own = name.rsplit(".", 1)[-1]
                if ours and alias and alias != own and (alias in OLD_MODULE_NAMES or alias in module_names):
                    found.append(f"{path}:{node.lineno} {name} as {alias}")
    return found


def test_no_import_takes_the_name_of_an_old_or_another_module():
    files = [*(ROOT / "camflow_jax").rglob("*.py"), *(ROOT / "tools").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in sorted(files)}
    found = misleading_aliases(sources, project_module_names())
    assert found == []


def test_the_alias_check_catches_an_old_name_and_allows_a_disambiguation():
    names = {"scenes", "synthetic", "run", "adaptation", "methods", "video", "device"}
    src = ("from camflow_jax.data.synthetic import scenes as synthetic\n"
           "from camflow_jax.adaptation import run as adaptation\n"
           "from camflow_jax.evaluation import methods as methods_lib\n"
           "from camflow_jax.io import video as video_io\n"
           "from camflow_jax.data.synthetic import scenes\n"
           "from camflow_jax.data.synthetic import device as synthetic_device\n"
           "from jax.sharding import PartitionSpec as P\n"
           "import camflow_jax.geometry.host as geometry_np\n"
           "def f():\n    from . import device as geometry\n")
    assert misleading_aliases({"m.py": src}, names) == [
        "m.py:1 scenes as synthetic", "m.py:2 run as adaptation", "m.py:8 camflow_jax.geometry.host as geometry_np",
        "m.py:10 device as geometry"]


def test_fewer_than_a_fifth_of_internal_imports_sit_inside_functions(edges):
    inside = [e for e in edges if e.inside_function]
    assert len(inside) < 0.2 * len(edges), (len(inside), len(edges))


def test_nothing_imports_a_command_line_and_only_they_import_the_harness(edges):
    for e in edges:
        assert e.target not in CLIS, e
        if e.target.startswith("camflow_jax.cli."):
            assert e.source in CLIS or e.source.startswith("camflow_jax.cli"), e


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
    config = smoke.get_config()  # helpers.TRAIN_FLAGS + EVAL_FLAG, num_steps=4: the reference's config
    config.update_from_flattened_dict({"batch_size": 4, "checkpoint_every": 2, "num_steps": 4, "data.num_train": 8,
                                       "data.num_eval": 2, "model.depths": (1,), "model.layer_depth": (1,),
                                       "model.num_heads": (2,), "model.width": 64})
    walk = architecture.config_walk(lambda c: loop.train_and_evaluate(c, wd), config)
    assert [r["step"] for r in logged_metrics(wd)] == [1, 2, 3, 4]  # steps 3 and 4 trained here
    assert (wd / "eval_4.json").is_file()
    assert {"camflow_jax.training.loop", "camflow_jax.data.datasets", "camflow_jax.training.heldout"} <= set(walk), walk
    assert len(walk) <= 8, walk


def test_the_package_re_exports_its_supported_names_lazily():
    """Each name of ``camflow_jax.__all__`` resolves to the object its own module defines; importing
    the package alone imports no JAX (a fresh process: the oracle is sys.modules)."""
    import subprocess
    import sys

    import camflow_jax
    from camflow_jax import bases
    from camflow_jax.data.synthetic.scenes import SyntheticScenes
    from camflow_jax.models.checkpoint import load_model
    from camflow_jax.predictor import Predictor
    from camflow_jax.refine import RefineConfig

    expected = {"__version__": "0.1.0", "Predictor": Predictor, "RefineConfig": RefineConfig,
                "SyntheticScenes": SyntheticScenes, "bases": bases, "load_model": load_model}
    assert set(camflow_jax.__all__) == set(expected)
    for name, value in expected.items():
        got = getattr(camflow_jax, name)
        assert (got == value if isinstance(value, str) else got is value), name
    with pytest.raises(AttributeError):
        camflow_jax.no_such_name  # noqa: B018
    code = ("import sys, camflow_jax; print(sorted(m for m in ('jax', 'flax', 'cv2', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]", out


def test_the_geometry_package_names_every_submodule_it_loads_lazily():
    """``from camflow_jax.geometry import photometric`` once fell through to the JAX module (not
    listed as a submodule), so the stabilizer's default run imported JAX."""
    from camflow_jax import geometry

    files = {p.stem for p in (ROOT / "camflow_jax" / "geometry").glob("*.py") if p.stem != "__init__"}
    assert files == set(geometry._SUBMODULES)
