"""Values built once per key and kept, a few at a time: :class:`BoundedMemo`.

The Predictor and the refinement keep device values that depend only on a size and a few
settings (the static bases' pyramid per working size, a constant depth's basis set per size
and intrinsics), so that a video or a benchmark of equal frames builds them once. Memory stays
bounded: when full, the memo forgets everything and starts again (sizes rarely alternate).
Safe to share between threads: the Predictor refines the pairs of a batch in several.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["BoundedMemo"]


class BoundedMemo:
    """``memo.get(key, make)``: ``make()``'s value for ``key``, made on the first call and kept.

    Args:
      size: how many values it keeps; making one more first forgets them all.
    """

    def __init__(self, size: int):
        if int(size) < 1:
            raise ValueError(f"a BoundedMemo keeps at least one value, got size {size}")
        self.size = int(size)
        self._values: dict = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The value kept for ``key``, or ``make()``'s, kept. One thread makes it while the
        others asking for a value wait (the same key is never made twice at once)."""
        with self._lock:
            if key in self._values:
                return self._values[key]
            value = make()
            if len(self._values) >= self.size:
                self._values.clear()
            self._values[key] = value
            return value

    def __len__(self) -> int:
        return len(self._values)

    def as_dict(self) -> dict:
        """A copy of what it keeps now (key -> value)."""
        with self._lock:
            return dict(self._values)
