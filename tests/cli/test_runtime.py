"""camflow_jax.cli.runtime: the entry points re-execute once with glibc.malloc.hugetlb=1.

The subprocess tests look at the child from the outside: its PID (same as the one started), the
environment it sees, how many times its program started, and the minor page faults of a large
malloc/free loop measured inside it (4 KiB pages without huge pages, 2 MiB with them)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from camflow_jax.cli import runtime
from helpers import ROOT

# Allocates, touches and frees 64 MiB five times (glibc mmaps it each time, as XLA's scratch
# buffers are) and reports the minor faults of the last four rounds, the environment and PID.
PROBE = textwrap.dedent("""
    import ctypes, json, os, resource, sys
    from camflow_jax.cli import runtime
    with open(sys.argv[1], "a") as f:
        f.write("start\\n")
    runtime.use_huge_pages()
    runtime.use_huge_pages()  # a second call (the guard) must not start it a third time
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    n, faults = 64 << 20, 0
    for i in range(5):
        r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        p = libc.malloc(n)
        ctypes.memset(p, 1, n)
        libc.free(p)
        if i:
            faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0
    print(json.dumps({"pid": os.getpid(), "tunables": os.environ.get("GLIBC_TUNABLES"),
                      "faults_per_round": faults / 4}))
""")

SUPPORTED, WHY = runtime.hugepage_decision({}, runtime.glibc_version(), runtime.thp_mode())
needs_hugepages = pytest.mark.skipif(not SUPPORTED, reason=f"no huge pages for malloc here: {WHY}")


def _env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in (runtime.OPT_OUT_ENV, runtime.GUARD_ENV, "GLIBC_TUNABLES")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def _probe(tmp_path, **extra):
    starts = tmp_path / "starts.txt"
    proc = subprocess.Popen([sys.executable, "-c", PROBE, str(starts)], env=_env(**extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return proc.pid, json.loads(out), starts.read_text().count("start")


def test_decision_and_tunables():
    ok = {"glibc": (2, 36), "thp": "madvise", "platform": "linux"}
    assert runtime.hugepage_decision({}, **ok)[0]
    assert runtime.hugepage_decision({}, (2, 36), "always", "linux")[0]
    assert runtime.hugepage_decision({runtime.OPT_OUT_ENV: "0"}, **ok)[0]
    assert runtime.hugepage_decision({"GLIBC_TUNABLES": "glibc.malloc.check=0"}, **ok)[0]
    for env, kw in [({runtime.OPT_OUT_ENV: "1"}, {}), ({runtime.GUARD_ENV: "1"}, {}),
                    ({"GLIBC_TUNABLES": "glibc.malloc.check=0:glibc.malloc.hugetlb=0"}, {}),
                    ({}, {"glibc": (2, 34)}), ({}, {"glibc": None}), ({}, {"thp": "never"}),
                    ({}, {"thp": None}), ({}, {"platform": "darwin"})]:
        assert not runtime.hugepage_decision(env, **{**ok, **kw})[0], (env, kw)
    assert runtime.with_hugetlb(None) == "glibc.malloc.hugetlb=1"
    assert runtime.with_hugetlb("glibc.malloc.check=0") == "glibc.malloc.check=0:glibc.malloc.hugetlb=1"


def test_thp_mode_reads_the_bracketed_word(tmp_path):
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert runtime.thp_mode(str(f)) == "madvise"
    assert runtime.thp_mode(str(tmp_path / "missing")) is None


@needs_hugepages
def test_reexec_once_same_pid_fewer_faults_and_opt_out(tmp_path):
    (tmp_path / "on").mkdir()
    pid, on, starts = _probe(tmp_path / "on", GLIBC_TUNABLES="glibc.malloc.check=0")
    assert on["pid"] == pid  # re-executed in place: signals and exit codes reach the same process
    assert starts == 2  # the original start and exactly one re-execution (no loop)
    assert on["tunables"] == "glibc.malloc.check=0:glibc.malloc.hugetlb=1"  # the user's value kept

    (tmp_path / "off").mkdir()
    pid, off, starts = _probe(tmp_path / "off", **{runtime.OPT_OUT_ENV: "1"})
    assert starts == 1 and off["tunables"] is None
    # 64 MiB = 16,384 pages of 4 KiB; with huge pages a few dozen 2 MiB faults.
    assert off["faults_per_round"] > 10_000, off
    assert on["faults_per_round"] < off["faults_per_round"] / 10, (on, off)


@needs_hugepages
def test_guard_prevents_reexec(tmp_path):
    _, out, starts = _probe(tmp_path, **{runtime.GUARD_ENV: "1"})
    assert starts == 1 and out["tunables"] is None


@needs_hugepages
def test_train_entry_point_reexecs_and_keeps_exit_code(tmp_path):
    """The real ``python -m camflow_jax.train``: its config file records what the process sees;
    a bad override still exits 2 with one line."""
    record = tmp_path / "seen.jsonl"
    cfg = tmp_path / "cfg.py"
    cfg.write_text(textwrap.dedent(f"""
        import json, os
        from camflow_jax.configs.smoke import get_config as _smoke

        def get_config():
            with open({str(record)!r}, "a") as f:
                f.write(json.dumps([os.getpid(), os.environ.get("GLIBC_TUNABLES")]) + "\\n")
            return _smoke()
    """))
    proc = subprocess.Popen([sys.executable, "-m", "camflow_jax.train", f"--config={cfg}",
                             f"--workdir={tmp_path / 'wd'}", "--config.no_such_key=1"],
                            env=_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert len(err.strip().splitlines()) == 1 and "no_such_key" in err
    seen = [json.loads(line) for line in record.read_text().splitlines()]
    assert seen and all(s == [proc.pid, "glibc.malloc.hugetlb=1"] for s in seen), seen
