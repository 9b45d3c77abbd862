"""Compile once per machine (camflow_jax.compilation; docs/performance.md, "Compile once"): where
the caches live and how to turn them off, the user's own JAX cache left alone, exported programs
reused by a fresh Predictor with the same results, and a cache that cannot be written, is
damaged, is shared by two processes at once or comes from another jax version never breaking a
run (at most one warning line).

Tests run as root, which ignores permission bits: an unwritable folder is a path under a regular
file (every write fails with ENOTDIR), a read-only or full disk a patched ``open``.
"""

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from camflow_jax import models
from camflow_jax.compilation import cache, exported, store
from camflow_jax.models import basis_set
from camflow_jax.predictor import Predictor
from helpers import ROOT

LOGGER = "camflow_jax.compilation.cache"

#: A fresh process: enable(), wait for the go file (so two start together), two jitted programs,
#: one stored artifact read back.
_PROBE = r"""
import sys, time
from pathlib import Path
from camflow_jax.compilation import cache, store
print("jax cache:", cache.enable())
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.005)
import jax, jax.numpy as jnp
x = jnp.arange(4096.0)
a = jax.jit(lambda v: jnp.sin(v) * 2 + v.sum())(x)
b = jax.jit(lambda v: jnp.cumsum(jnp.cos(v)))(x)
payload = bytes(range(256)) * 4096
store.write("probe", ["tiny", 1], payload)
got = store.read("probe", ["tiny", 1])
assert got in (payload, None), "a stored file must be whole or missing"
print("ok", float(a[3]), float(b[-1]), got == payload)
"""


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
                        cache.DIR_ENV, cache.OPT_OUT_ENV, "XDG_CACHE_HOME")}
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    env.update(extra)
    return env


def _probe(tmp_path, env, go=None):
    go = go or tmp_path / "go"
    go.touch()
    return subprocess.Popen([sys.executable, "-c", _PROBE, str(go)], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert out.splitlines()[-1].startswith("ok"), out
    return out, err


def _entries(folder: Path):
    return sorted(p for p in folder.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------- where, opt-out
def test_cache_root_follows_the_environment(tmp_path):
    home = {"HOME": "/h"}
    assert cache.cache_root(home) == Path("/h/.cache/camflow_jax")
    assert cache.cache_root({**home, "XDG_CACHE_HOME": "/x"}) == Path("/x/camflow_jax")
    assert cache.cache_root({**home, "XDG_CACHE_HOME": "relative"}) == Path("/h/.cache/camflow_jax")
    assert cache.cache_root({**home, cache.DIR_ENV: str(tmp_path)}) == tmp_path
    for off in ("1", "yes"):
        assert cache.cache_root({**home, cache.DIR_ENV: str(tmp_path), cache.OPT_OUT_ENV: off}) is None
    assert cache.cache_root({**home, cache.OPT_OUT_ENV: "0"}) == Path("/h/.cache/camflow_jax")


def test_tests_never_use_the_per_user_folder():
    """conftest.py points both caches at the session's temporary folder."""
    root = cache.cache_root()
    assert root is not None and Path(os.environ[cache.DIR_ENV]) == root
    assert Path.home() / ".cache" not in root.parents
    assert jax.config.jax_compilation_cache_dir == os.environ["JAX_COMPILATION_CACHE_DIR"]
    assert cache.enable() == os.environ["JAX_COMPILATION_CACHE_DIR"]  # the "user's" setting wins


def test_default_folder_then_a_users_own_then_opted_out(tmp_path):
    """A fresh process stores its programs under ~/.cache/camflow_jax/jax/<host> (every program:
    threshold 0); with JAX_COMPILATION_CACHE_DIR set JAX uses that folder alone; with
    CAMFLOW_JAX_NO_CACHE=1 nothing is written anywhere. Never a warning."""
    ours = tmp_path / "home" / ".cache" / "camflow_jax"
    _, err = _finish(_probe(tmp_path, _env(tmp_path)))
    assert "warning" not in err.lower(), err
    programs = [p for p in _entries(ours / "jax") if p.name.endswith("-cache")]
    assert len(programs) >= 2 and {p.parent.name for p in programs} == {cache.host_tag()}
    assert len(_entries(ours / "probe")) == 1

    theirs = tmp_path / "theirs"
    _finish(_probe(tmp_path, _env(tmp_path, HOME=str(tmp_path / "home2"), JAX_COMPILATION_CACHE_DIR=str(theirs),
                                  JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")))
    assert any(p.name.endswith("-cache") for p in _entries(theirs))
    assert not (tmp_path / "home2" / ".cache" / "camflow_jax" / "jax").exists()

    _finish(_probe(tmp_path, _env(tmp_path, HOME=str(tmp_path / "home3"), **{cache.OPT_OUT_ENV: "1"})))
    assert not (tmp_path / "home3").exists()


# ----------------------------------------------------------------------------- robustness
def test_an_unwritable_cache_folder_costs_one_warning_line(tmp_path):
    """The cache folder under a regular file: every write fails (ENOTDIR, whatever the user's
    rights); the run still succeeds, with exactly one warning line on stderr."""
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    proc = _probe(tmp_path, _env(tmp_path, **{cache.DIR_ENV: str(blocker / "cache")}))
    out, err = _finish(proc)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "warning" in lines[0] and "not a directory" in lines[0], err
    assert out.splitlines()[-1].endswith("False")  # nothing stored, nothing read back


def test_two_processes_share_a_cache_at_once(tmp_path):
    """Two fresh processes compile and store the same programs at the same moment: both succeed
    without a warning, every entry is whole, and a third process reads them without compiling."""
    root = tmp_path / "shared"
    env = _env(tmp_path, **{cache.DIR_ENV: str(root)})
    go = tmp_path / "go_together"
    procs = [subprocess.Popen([sys.executable, "-c", _PROBE, str(go)], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    time.sleep(0.5)
    go.touch()
    for p in procs:
        _, err = _finish(p)
        assert "warning" not in err.lower(), err
    files = _entries(root)
    assert not [p for p in files if ".partial-" in p.name], files  # no temporary left behind
    programs = [p for p in files if p.name.endswith("-cache")]
    assert programs and all(cache._intact(p.read_bytes()) for p in programs)
    stamps = {p: p.stat().st_mtime_ns for p in programs}
    _, err = _finish(_probe(tmp_path, env))
    assert "warning" not in err.lower(), err
    assert {p: p.stat().st_mtime_ns for p in programs} == stamps  # read back, not compiled again


def _failing_open(after: int, code: int = errno.ENOSPC):
    """``open`` whose files accept ``after`` bytes, then fail like a full (or read-only) disk."""
    import builtins

    class Failing:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            if after < len(data):
                self.fh.write(data[:after])
                raise OSError(code, os.strerror(code))
            return self.fh.write(data)

    def fake(path, mode="r", *args, **kwargs):
        fh = builtins.open(path, mode, *args, **kwargs)
        return Failing(fh) if "w" in mode else fh

    return fake


def test_jax_entries_full_disk_read_only_and_damaged(tmp_path, monkeypatch, caplog):
    """JAX's entries through this package's store: a write that fails half-way (full disk) leaves
    no entry and no temporary, warns once and stops writing; reads still work (a read-only
    folder); a damaged entry is a miss and the next write replaces it."""
    from jax._src import compilation_cache as cc

    monkeypatch.setattr(cache, "_warned", False)
    store_cls = cache._file_cache_class()
    folder = tmp_path / "jax"
    entry = cc.compress_executable(b"\0\0\0\1" + np.random.default_rng(0).bytes(20000))  # incompressible
    good = store_cls(str(folder))
    good.put("k1", entry)
    assert good.get("k1") == entry and good.get("missing") is None

    full = store_cls(str(folder))
    monkeypatch.setattr(cache, "open", _failing_open(100), raising=False)
    with caplog.at_level("DEBUG", logger=LOGGER):
        full.put("k2", entry)
        full.put("k3", entry)  # no second attempt, no second warning
    warnings_ = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings_) == 1 and "disk full" in warnings_[0].getMessage()
    assert sorted(p.name for p in folder.iterdir()) == ["k1-cache"]
    assert full.get("k1") == entry  # still read

    monkeypatch.undo()
    (folder / "k1-cache").write_bytes(entry[: len(entry) // 2])  # truncated by someone else
    assert good.get("k1") is None
    good.put("k1", entry)
    assert good.get("k1") == entry


def test_store_files_are_checked_and_keyed_by_the_environment(tmp_path, monkeypatch, caplog):
    """A stored file is used only when whole and made in the same environment: a file written
    under another jax version, even at the same path, is ignored; a failed write warns once."""
    monkeypatch.setenv(cache.DIR_ENV, str(tmp_path))
    monkeypatch.setattr(cache, "_warned", False)
    payload = b"payload" * 1000
    assert store.write("t", ["a", 1], payload) and store.read("t", ["a", 1]) == payload
    assert store.read("t", ["a", 2]) is None
    path = store.path_for("t", ["a", 1])
    data = path.read_bytes()
    path.write_bytes(data[:-10])  # truncated
    assert store.read("t", ["a", 1]) is None

    real = store.environment()
    monkeypatch.setattr(store, "environment", lambda: {**real, "jax": "0.0.1"})
    old_path = store.path_for("t", ["a", 1])
    assert old_path != path  # another version, another file...
    store.write("t", ["a", 1], payload)
    monkeypatch.setattr(store, "environment", lambda: real)
    os.replace(old_path, path)  # ...and even at this version's path it is not read
    assert store.read("t", ["a", 1]) is None

    monkeypatch.setattr(store, "open", _failing_open(0, errno.EROFS), raising=False)
    with caplog.at_level("WARNING", logger=LOGGER):
        assert not store.write("t", ["b"], payload)
        assert not store.write("t", ["c"], payload)
    assert len(caplog.records) == 1 and "read-only" in caplog.records[0].getMessage()
    assert not [p for p in tmp_path.rglob("*") if ".partial-" in p.name]


# ----------------------------------------------------------------------------- exported programs
def test_exported_jit_loads_in_a_fresh_object_with_the_same_results(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.DIR_ENV, str(tmp_path))

    def f(x, y, *, scale):
        return {"z": jnp.tanh(x @ y) * scale, "s": (x.sum(), y.mean())}

    x, y = np.random.default_rng(0).normal(size=(2, 16, 16)).astype(np.float32)
    first = exported.ExportedJit(f, name="test.f", key=("v1",), static_argnames=("scale",))
    a = first(x, y, scale=2.0)
    first(x, y, scale=3.0)
    assert first.how() == ["exported", "exported"]
    second = exported.ExportedJit(f, name="test.f", key=("v1",), static_argnames=("scale",))
    b = second(x, y, scale=2.0)
    assert second.how() == ["loaded"]
    plain = jax.jit(f, static_argnames=("scale",))(x, y, scale=2.0)
    for got in (a, b):
        jax.tree.map(np.testing.assert_array_equal, got, plain)
    other_key = exported.ExportedJit(f, name="test.f", key=("v2",), static_argnames=("scale",))
    other_key(x, y, scale=2.0)
    assert other_key.how() == ["exported"]  # what the function reads besides its arguments changed

    monkeypatch.setenv(cache.OPT_OUT_ENV, "1")
    off = exported.ExportedJit(f, name="test.f", key=("v1",), static_argnames=("scale",))
    jax.tree.map(np.testing.assert_array_equal, off(x, y, scale=2.0), plain)
    assert off.how() == ["jit"]


def test_a_stored_program_that_fails_is_exported_again(tmp_path, monkeypatch):
    """A stored artifact that deserializes but fails on its first call (cannot be lowered or
    compiled here) never fails the run: the function is exported again from the code."""
    monkeypatch.setenv(cache.DIR_ENV, str(tmp_path))
    x = np.arange(6.0, dtype=np.float32)
    exported.ExportedJit(lambda v: v * 3, name="test.triple")(x)

    class Broken:
        def call(self, *args):
            raise RuntimeError("cannot lower this here")

    monkeypatch.setattr(jax.export, "deserialize", lambda data: Broken())
    again = exported.ExportedJit(lambda v: v * 3, name="test.triple")
    np.testing.assert_array_equal(again(x), x * 3)
    np.testing.assert_array_equal(again(x), x * 3)
    assert again.how() == ["exported"]


def test_exported_jit_falls_back_to_jit_when_it_cannot_serialize(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.DIR_ENV, str(tmp_path))
    monkeypatch.setattr(exported, "can_serialize", lambda: False)  # e.g. no flatbuffers
    f = exported.ExportedJit(lambda v: v * 2, name="test.double")
    np.testing.assert_array_equal(f(np.arange(3.0)), [0.0, 2.0, 4.0])
    assert f.how() == ["jit"] and not list(tmp_path.rglob("*.bin"))


CFG = {"group_sizes": [12, 12], "embed_dim": 8, "depths": (1,), "layer_depth": (1,), "num_heads": (2,),
       "height": 64, "width": 64}  # the training tests' one-level net


@pytest.fixture(scope="module")
def tiny():
    model = models.build_model(CFG)
    return model, models.init_variables(model, jax.random.key(0), 64, 64)


def test_a_fresh_predictor_loads_the_exported_forward(tmp_path, monkeypatch, tiny):
    """A second Predictor of the same architecture (another instance, as in a fresh process)
    loads the forward traced by the first, and all three (exported, loaded, caches off) agree
    bit for bit."""
    monkeypatch.setenv(cache.DIR_ENV, str(tmp_path))
    model, variables = tiny
    rng = np.random.default_rng(1)
    a = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
    b = np.roll(a, 2, axis=1)
    outs, hows = [], []
    for _ in range(2):
        pred = Predictor(model, variables, None, CFG, refine=False)
        outs.append(pred(a, b))
        hows.append(pred._forward.how())
    assert hows == [["exported"], ["loaded"]]
    monkeypatch.setenv(cache.OPT_OUT_ENV, "1")
    pred = Predictor(model, variables, None, CFG, refine=False)
    outs.append(pred(a, b))
    assert pred._forward.how() == ["jit"]
    for k in ("flow_f", "flow_b", "homography", "coeffs_f"):
        np.testing.assert_array_equal(outs[0][k], outs[1][k])
        np.testing.assert_array_equal(outs[0][k], outs[2][k])


def test_static_bases_are_computed_once_per_machine(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.DIR_ENV, str(tmp_path))
    cfg = {"height": 16, "width": 32, "bases": {"num_stochastic": 4}}
    first = basis_set.static_bases(cfg)
    (path,) = list((tmp_path / "bases").glob("*.bin"))
    monkeypatch.setattr(basis_set.bases_lib, "static_bases", lambda *a, **k: pytest.fail("computed again"))
    again = basis_set.static_bases(cfg)
    np.testing.assert_array_equal(first, again)
    assert first.shape == (16, 16, 32, 2) and first.dtype == np.float32
    monkeypatch.undo()
    monkeypatch.setenv(cache.DIR_ENV, str(tmp_path))
    path.write_bytes(b"damaged")
    np.testing.assert_array_equal(basis_set.static_bases(cfg), first)  # computed again, same values


def test_a_cache_folder_is_bounded_and_the_files_used_longest_ago_go_first(tmp_path):
    """POOR (issue 63): the cache never evicted programs of older package versions (11 -> 21 MB
    after one edit). Oracle: file mtimes set by hand and the sizes written."""
    import os

    from camflow_jax.compilation import cache as cache_lib

    day = cache_lib.TOUCH_AFTER_SECONDS
    for i, age in enumerate((5 * day, 4 * day, 3 * day, 2 * day, 100)):  # seconds ago: file 0 used longest ago
        f = tmp_path / f"entry{i}-cache"
        f.write_bytes(b"x" * 1000)
        t = f.stat().st_mtime - age
        os.utime(f, (t, t))
    (tmp_path / ".partial-tmp").write_bytes(b"y" * 5000)  # a temporary in flight: never removed
    cache_lib.touch(tmp_path / "entry0-cache")  # just read: now the most recently used
    removed = cache_lib.prune(tmp_path, 2500, once=False)
    assert removed == 3000
    assert sorted(p.name for p in tmp_path.iterdir()) == [".partial-tmp", "entry0-cache", "entry4-cache"]
    assert cache_lib.prune(tmp_path, 2500, once=True) == 0 and cache_lib.prune(tmp_path, 10, once=True) == 0
