"""The CamFlow estimators: ``camflow`` (the model with test-time refinement) and ``camflow_net``
(the network alone), around a :class:`camflow_jax.predictor.Predictor` loaded on first use.

Registered by name in :mod:`.registry`; nothing here imports JAX until the model is loaded.
"""

from __future__ import annotations

import inspect

import numpy as np

from camflow_jax.estimators.base import Estimator, Motion, check_pair

__all__ = ["CamFlow", "CamFlowNet", "preferred_batch_size"]


class CamFlow(Estimator):
    """A :class:`camflow_jax.predictor.Predictor`, loaded once on first use (or given as
    ``predictor``: anything called ``predictor(img1, img2, depth1=, depth2=, intrinsics=,
    refine=)`` returning the Predictor's dict). ``confidence=True`` also asks it for the
    confidence maps (``confidence=True`` in the call; logvar_f, logvar_b in ``extras``); by
    default the network runs its flows-only path. ``forward_only=True``: the Predictor's
    forward-only path (no backward flow; about half the network's and the refinement's work),
    for a predictor whose call takes ``forward_only``."""

    refine = True

    def __init__(self, *, checkpoint: str | None = None, channel_order: str = "rgb", predictor=None,
                 forward_only: bool = False, confidence: bool = False, refine_size: int | None = None):
        if predictor is not None and checkpoint is not None:
            raise ValueError("give a predictor or a checkpoint, not both")
        if refine_size is not None:
            if not self.refine:
                raise ValueError("refine_size needs the refined camflow, not the network alone")
            from camflow_jax.refine import RefineConfig

            self.refine = RefineConfig.at_size(int(refine_size))  # ValueError below the default's size
        self.refine_size = None if refine_size is None else int(refine_size)
        self.checkpoint, self.channel_order = checkpoint, channel_order
        self.confidence = bool(confidence)
        self.forward_only = bool(forward_only)
        self._predictor = predictor
        self._extra = None

    @property
    def predictor(self):
        """The model (loaded here on first access)."""
        if self._predictor is None:
            from camflow_jax.predictor import Predictor

            self._predictor = Predictor.load(self.checkpoint, channel_order=self.channel_order)
        return self._predictor

    def refine_for(self, h: int, w: int):
        """``(refine setting, note)`` for an ``h`` x ``w`` pair. With ``refine_size`` N the
        refinement works at up to N px: a pair whose longer side is below N refines at its own
        size, with :meth:`RefineConfig.at_size` of that size (the default's below 288 px), and a
        note says so (a 192 px pair at ``at_size(4608)`` had 7 pyramid levels, the coarsest 3 px
        wide, and the result fell back to the network's)."""
        if self.refine_size is None or max(h, w) >= self.refine_size:
            return self.refine, ""
        from camflow_jax.refine import RefineConfig

        size = max(RefineConfig().max_size, max(h, w))
        return (RefineConfig.at_size(size),
                f"refine size {self.refine_size} is larger than the pair ({max(h, w)} px on its longer side): "
                f"refined at {size} px")

    def _call_options(self) -> dict:
        """The predictor call's keyword options beyond the pair's (confidence, forward_only),
        only those asked for; forward_only only where the predictor's call takes it."""
        if self._extra is None:
            extra = {"confidence": True} if self.confidence else {}
            if self.forward_only:
                try:
                    params = inspect.signature(self.predictor).parameters
                except (TypeError, ValueError):  # no signature to read: the plain protocol
                    params = {}
                if "forward_only" in params:
                    extra["forward_only"] = True
            self._extra = extra
        return self._extra

    def _estimate(self, a, b, depth1, depth2, intrinsics):
        extra = self._call_options()
        refine, size_note = self.refine_for(*np.shape(a)[:2])
        out = self.predictor(a, b, depth1=depth1, depth2=depth2, intrinsics=intrinsics,
                             refine=refine, **extra)
        return self._motion(out, size_note)

    @property
    def batch_size(self) -> int:
        """:func:`preferred_batch_size` of the predictor (loading it)."""
        return preferred_batch_size(self.predictor)

    def estimate_many(self, pairs, *, checked: bool = True) -> list[Motion]:
        """:meth:`Estimator.estimate_many` with the pairs that need the model in batches of
        :meth:`camflow_jax.predictor.Predictor.predict_batch` (a predictor without it: one
        call per pair); the same checks as the call (``checked=False``: none, as :meth:`raw`)."""
        if not hasattr(self.predictor, "predict_batch"):
            return super().estimate_many(pairs, checked=checked)
        checked = checked and self.checked
        out: list = [None] * len(pairs)
        todo = {}  # the refine setting (per size) -> [(index, a, b, depth1, depth2, K)]
        for i, p in enumerate(pairs):
            a, b = check_pair(p[0], p[1])
            early = self._screen(a, b) if checked else None
            if early is not None:
                out[i] = early
                continue
            refine, note = self.refine_for(*a.shape[:2])
            cam = tuple(p[2:]) + (None,) * (5 - len(p))
            todo.setdefault((repr(refine), note), (refine, note, []))[2].append((i, a, b, *cam))
        extra = self._call_options()
        for refine, note, items in todo.values():
            with_depth = [it for it in items if it[3] is not None]
            for group in (with_depth, [it for it in items if it[3] is None]):
                if not group:
                    continue
                cams = {} if group[0][3] is None else {"depths1": [it[3] for it in group],
                                                       "depths2": [it[4] for it in group]}
                Ks = [it[5] for it in group]
                if all(K is not None for K in Ks):
                    cams["intrinsics"] = np.stack([np.asarray(K, np.float64).reshape(4) for K in Ks])
                elif any(K is not None for K in Ks):  # some with intrinsics, some without: one at a time
                    call = self if checked else self.raw
                    for it in group:
                        out[it[0]] = call(it[1], it[2], depth1=it[3], depth2=it[4], intrinsics=it[5])
                    continue
                results = self.predictor.predict_batch([it[1] for it in group], [it[2] for it in group],
                                                       refine=refine, **cams, **extra)
                for it, res in zip(group, results):
                    m = self._motion(res, note)
                    out[it[0]] = self._vet(it[1], it[2], m) if checked else m
        return out

    @staticmethod
    def _motion(out, size_note: str) -> Motion:
        """The Motion of a predictor's result dict."""
        if not isinstance(out, dict) or "flow_f" not in out:
            raise ValueError("the camflow predictor must return a dict with 'flow_f'")
        info = out.get("refine_info") or {}
        H, weights = out.get("homography"), out.get("weights_f")
        if weights is not None:  # [H, W] (a trailing channel of 1 is dropped)
            weights = np.asarray(weights, np.float32).reshape(np.shape(out["flow_f"])[:2])
        note = "; ".join(n for n in (size_note, str(info.get("note") or "")) if n)
        return Motion(out["flow_f"], out.get("flow_b"), None if H is None else np.asarray(H, np.float64),
                      weights, note, extras=out)


class CamFlowNet(CamFlow):
    refine = False


def preferred_batch_size(predictor) -> int:
    """Pairs per batch worth gathering for ``predictor``: its ``preferred_batch_size()`` where it
    has one and :meth:`~camflow_jax.predictor.Predictor.predict_batch`, else 1."""
    pick = getattr(predictor, "preferred_batch_size", None)
    return int(pick()) if callable(pick) and hasattr(predictor, "predict_batch") else 1
