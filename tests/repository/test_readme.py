"""README: its Python snippets run as written, and the files and commands it names exist."""

import re
import subprocess
import sys

import matplotlib

from helpers import ROOT

README = (ROOT / "README.md").read_text()


def test_readme_python_snippets_run(monkeypatch):
    matplotlib.use("Agg")
    monkeypatch.chdir(ROOT)
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert len(blocks) >= 2
    for i, block in enumerate(blocks):
        exec(compile(block, f"README.md python block {i}", "exec"), {})


def test_readme_links_and_configs_exist():
    for link in re.findall(r"\]\(((?:docs|notebooks)/[^)#]+|LICENSE|CITATION\.cff)\)", README):
        assert (ROOT / link).is_file(), link
    for cfg in re.findall(r"--config=(configs/[a-z_]+\.py)", README):  # NAME is a placeholder
        assert (ROOT / cfg).is_file(), cfg
    assert len(README.splitlines()) <= 220


def test_readme_commands_parse_their_flags():
    # Every CLI the README names answers --help (its flags exist under those names).
    modules = sorted(set(re.findall(r"python -m (camflow_jax\.\w+)", README)))
    assert {"camflow_jax.train", "camflow_jax.estimate", "camflow_jax.stabilize", "camflow_jax.evaluate"} <= set(modules)
    for m in modules:
        proc = subprocess.run([sys.executable, "-m", m, "--help"], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        # absl's --help (the trainer) exits with 1 after printing; argparse tools with 0.
        assert proc.returncode in ((0, 1) if m == "camflow_jax.train" else (0,)), (m, proc.stderr[-1000:])
        assert "--" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr, m
    est = subprocess.run([sys.executable, "-m", "camflow_jax.estimate", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300).stdout
    for flag in ("--depth1", "--depth2", "--intrinsics"):
        assert flag in est


def test_ci_runs_the_readmes_test_line():
    """.ci/run's command is the README's second line, ruff's check before the tests included."""
    readme_line = re.search(r"```bash\n[^\n]*\n([^\n]*)\n", README).group(1)
    ci_lines = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln and not ln.startswith("#")]
    assert readme_line in ci_lines, (readme_line, ci_lines)
    assert "ruff check . && python -m pytest -q tests" in readme_line
