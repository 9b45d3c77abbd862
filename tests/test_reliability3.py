"""Issue 63 ("Results you can trust, round 3"): inputs that cannot be read twice, training
settings, and the POOR cases, grouped by surface. Signals: tests/test_signals.py."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def _env(tmp_path):
    (tmp_path / "systmp").mkdir(exist_ok=True)
    return dict(os.environ, PYTHONPATH=str(REPO), TMPDIR=str(tmp_path / "systmp"))


def _cli(tmp_path, module, *args, timeout=300, **kw):
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=timeout, **kw)


def _one_error_line(proc, *needles, code=2):
    assert proc.returncode == code, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _clip(path, n=10, h=48, w=64):
    wr = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (w, h))
    rng = np.random.default_rng(0)
    base = cv2.GaussianBlur(rng.integers(0, 256, (h + 8, w + 8, 3), dtype=np.uint8), (5, 5), 0)
    for t in range(n):
        wr.write(np.ascontiguousarray(base[t % 5:t % 5 + h, t % 7:t % 7 + w]))
    wr.release()
    return path


# ----------------------------------------------------------------------------- streams as input
def test_a_named_pipe_or_piped_stdin_as_video_is_refused_at_once(tmp_path):
    """Bad (issue 63): a named pipe as input hung for ever (opened a second time, in FFmpeg's C
    code, deaf to SIGINT / SIGTERM); /dev/stdin fed by a pipe was blamed as "unknown format or
    corrupt file". Now refused at once, before opening it, exit 2, one line saying to write it
    to a file first; /dev/stdin redirected from a regular file still works."""
    clip = _clip(tmp_path / "clip.avi")
    fifo = tmp_path / "f.mp4"
    os.mkfifo(fifo)

    def writer():
        try:
            with open(fifo, "wb") as f:  # blocks until a reader opens the pipe
                f.write(clip.read_bytes())
        except (BrokenPipeError, OSError):
            pass

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    t0 = time.monotonic()
    proc = _cli(tmp_path, "camflow_jax.stabilize", fifo, "-o", "o.avi", "--estimator=identity", "-q", timeout=120)
    _one_error_line(proc, f"input {fifo} is a pipe", "write it to a file first")
    assert time.monotonic() - t0 < 60 and not (tmp_path / "o.avi").exists()
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets the writer's open return
    t.join(5)

    cat = subprocess.Popen(["cat", str(clip)], stdout=subprocess.PIPE)
    proc = _cli(tmp_path, "camflow_jax.stabilize", "/dev/stdin", "-o", "o.avi", "--estimator=identity", "-q",
                stdin=cat.stdout)
    cat.stdout.close()
    cat.wait(10)
    _one_error_line(proc, "input /dev/stdin is a pipe", "write it to a file first")
    with open(clip, "rb") as f:
        proc = _cli(tmp_path, "camflow_jax.stabilize", "/dev/stdin", "-o", "o.avi", "--estimator=identity", "-q",
                    stdin=f)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "o.avi").exists()
