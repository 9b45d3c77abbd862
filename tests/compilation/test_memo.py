"""camflow_jax.compilation.memo.BoundedMemo: made once per key, bounded, shared by threads."""

from __future__ import annotations

import threading
import time

import pytest

from camflow_jax.compilation.memo import BoundedMemo


def test_a_value_is_made_once_and_the_memo_forgets_all_when_full():
    made = []

    def maker(k):
        return lambda: made.append(k) or f"value {k}"

    memo = BoundedMemo(2)
    assert [memo.get(k, maker(k)) for k in ("a", "b", "a", "b")] == ["value a", "value b"] * 2
    assert made == ["a", "b"]
    assert memo.get("c", maker("c")) == "value c"  # full: a and b are forgotten
    assert memo.as_dict() == {"c": "value c"}
    assert memo.get("a", maker("a")) == "value a" and made == ["a", "b", "c", "a"]
    with pytest.raises(ValueError, match="at least one value"):
        BoundedMemo(0)


def test_threads_asking_at_once_get_one_value_made_once():
    memo, made, barrier = BoundedMemo(1), [], threading.Barrier(8)

    def make():
        made.append(1)
        time.sleep(0.05)  # long enough for every thread to ask while it is made
        return object()

    got = []

    def ask():
        barrier.wait()
        got.append(memo.get("key", make))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and len(got) == 8 and all(g is got[0] for g in got)
