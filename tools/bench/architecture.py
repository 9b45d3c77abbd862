"""The package's shape, measured: the import graph (cycles, imports inside functions), files
directly in the package, file sizes, and the modules a training config passes through.

``python -m tools.bench architecture [--walk] [--json FILE]`` prints the report (:func:`main`); ``tests/repository/test_architecture.py`` holds the package
to the limits docs/architecture.md states. The import graph is read from the source with
:mod:`ast` (nothing is imported): every ``import camflow_jax...`` / ``from camflow_jax... import``
statement, at module level or inside a function, is an edge from its module to the module it
names (``from P import name`` counts ``P.name`` when that is a module, else ``P``). A package's
``__init__`` is a module of its own.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

__all__ = ["ImportEdge", "package_modules", "import_edges", "import_cycles", "line_counts", "top_level_files",
           "config_walk", "smoke_config_walk", "main"]

PACKAGE = "camflow_jax"


@dataclasses.dataclass(frozen=True)
class ImportEdge:
    """One import statement's target: ``source`` imports ``target`` (module names), at ``line``,
    ``inside_function`` when the statement sits in a function body."""

    source: str
    target: str
    line: int
    inside_function: bool


def package_root() -> Path:
    return Path(__file__).resolve().parents[2] / PACKAGE


def package_modules(root: Path | None = None) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` file of the package."""
    root = Path(root or package_root())
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _targets(module: str, is_package: bool, node, modules) -> list[str]:
    names = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".")
            parts = parts[:len(parts) - node.level + (1 if is_package else 0)]
            base = ".".join(parts + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    out = []
    for name in names:
        if not (name == PACKAGE or name.startswith(PACKAGE + ".")):
            continue
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in modules and name not in out:
            out.append(name)
    return out


def import_edges(root: Path | None = None) -> list[ImportEdge]:
    """Every internal import of the package (one per statement and target module)."""
    modules = package_modules(root)
    edges = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))

        def visit(node, in_function: bool):
            for child in ast.iter_child_nodes(node):
                inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _targets(module, path.name == "__init__.py", child, modules):
                        if target != module:
                            edges.append(ImportEdge(module, target, child.lineno, in_function))
                visit(child, inside)

        visit(tree, False)
    return edges


def import_cycles(edges: list[ImportEdge]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), imports inside functions
    included: each is an import cycle."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def connect(v: str, counter: Iterator[int]):
        index[v] = low[v] = next(counter)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w, counter)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    counter = iter(range(10**9))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                connect(v, counter)
    finally:
        sys.setrecursionlimit(limit)
    return cycles


def line_counts(root: Path | None = None) -> dict[str, int]:
    """Lines per library file (path relative to the repository)."""
    root = Path(root or package_root())
    return {str(p.relative_to(root.parent)): len(p.read_text().splitlines()) for p in sorted(root.rglob("*.py"))}


def top_level_files(root: Path | None = None) -> list[str]:
    """The ``.py`` files directly in the package folder."""
    root = Path(root or package_root())
    return sorted(p.name for p in root.glob("*.py"))


def config_walk(run, config) -> list[str]:
    """The package modules whose functions receive ``config`` or a part of it (a nested
    ConfigDict, by identity) as an argument while ``run(config)`` runs, in order of first visit.

    Traced with :func:`sys.setprofile`: at each Python call, the called function's arguments are
    compared (``is``) with the config and its nested dicts. A module counts once however often it
    is entered."""
    parts = set()

    def collect(c):
        parts.add(id(c))
        for v in c.values():
            if hasattr(v, "values") and hasattr(v, "to_dict"):
                collect(v)

    collect(config)
    prefix = str(package_root())
    modules = package_modules()
    by_file = {str(p): m for m, p in modules.items()}
    seen: list[str] = []

    def profile(frame, event, arg):
        if event != "call":
            return
        filename = frame.f_code.co_filename
        if not filename.startswith(prefix):
            return
        module = by_file.get(filename)
        if module is None or module in seen:
            return
        code = frame.f_code
        nargs = code.co_argcount + code.co_kwonlyargcount
        local = frame.f_locals
        for name in code.co_varnames[:nargs]:
            if id(local.get(name)) in parts:
                seen.append(module)
                return

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        run(config)
    finally:
        sys.setprofile(previous)
    return seen


#: The one-step run of ``--walk``: the smoke config with the training tests' tiny net.
WALK_OVERRIDES = {"batch_size": 4, "num_steps": 1, "data.num_train": 8, "data.num_eval": 2, "model.depths": (1,),
                  "model.layer_depth": (1,), "model.num_heads": (2,), "model.width": 64}


def smoke_config_walk() -> list[str]:
    """``config_walk`` of a one-step run of the smoke config (:data:`WALK_OVERRIDES`) in a temporary workdir."""
    from camflow_jax.configs import smoke
    from camflow_jax.training import loop

    config = smoke.get_config()
    config.update_from_flattened_dict(WALK_OVERRIDES)
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):  # the run's log
        return config_walk(lambda c: loop.train_and_evaluate(c, Path(tmp) / "wd"), config)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench architecture", description=__doc__.splitlines()[0])
    p.add_argument("--walk", action="store_true", help="also trace a config through a one-step training run")
    p.add_argument("--json", help="write the report to this file too")
    args = p.parse_args(argv)
    edges = import_edges()
    inside = [e for e in edges if e.inside_function]
    report = {
        "modules": len(package_modules()),
        "internal_imports": len(edges),
        "inside_functions": len(inside),
        "inside_share": round(len(inside) / max(len(edges), 1), 3),
        "cycles": import_cycles(edges),
        "top_level_files": top_level_files(),
        "over_700_lines": {f: n for f, n in line_counts().items() if n > 700},
        "longest": max(line_counts().items(), key=lambda kv: kv[1]),
        "inside_by_module": dict(Counter(e.source for e in inside).most_common()),
        "inside": [f"{e.source}:{e.line} -> {e.target}" for e in inside],
    }
    if args.walk:
        report["config_walk"] = smoke_config_walk()
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
