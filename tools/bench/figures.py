"""Figures for the docs, drawn from real data (Debian's opencv-doc) with matplotlib.

:func:`refinement_figure`: the Aloe stereo pair, the shipped network's error, the refined
error and the refinement's inlier weights (docs/refinement.md).
:func:`loss_curve`: a training run's loss and speed from its workdir's ``metrics.jsonl``
(docs/model_card.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from camflow_jax.predictor import Predictor
from tools.bench import opencv_doc, real

__all__ = ["refinement_figure", "loss_curve"]


def loss_curve(workdir, out_path, title: str = "") -> list[dict]:
    """The motion loss and pairs/s of the run in ``workdir`` against its steps (one point per
    logged step), written to ``out_path`` (PNG); returns the points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in (Path(workdir) / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "motion" in r]
    if not rows:
        raise ValueError(f"{workdir}: metrics.jsonl has no logged training step")
    steps = [r["step"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
    ax1.plot(steps, [r["motion"] for r in rows], "o-")
    ax1.set(xlabel="step", ylabel="motion loss (Laplace NLL)", yscale="log", title=title or None)
    ax2.plot(steps[1:], [r["pairs_per_sec"] for r in rows[1:]], "o-")
    ax2.set(xlabel="step", ylabel="pairs/s since the last log", ylim=(0, 1.15 * max(r["pairs_per_sec"] for r in rows)))
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return rows


def refinement_figure(data, out_path, width: int = 576, predictor=None) -> dict:
    """Writes a 2x2 PNG (left image | EPE of the network | EPE refined | weights) for Aloe
    with depth from the ground-truth disparity (the setting of the real-image table) and
    returns the two mean EPEs on valid pixels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    left_f, right_f, disp_f, valid_f = opencv_doc.load_stereo(Path(data))
    left, right, disp, valid, _ = real.resize_pair(left_f, right_f, disp_f, valid_f, width)
    h, w = disp.shape
    gt = real.disparity_to_flow(disp, valid)
    disp1 = real.fill_rows(disp, valid)
    d2, ok2 = real.forward_project_disparity(disp1, np.ones_like(valid))
    disp2 = real.fill_rows(d2, ok2)
    pred = predictor or Predictor.from_pretrained()
    out = pred(left, right, depth1=1.0 / disp1, depth2=1.0 / disp2, intrinsics=real.default_intrinsics(h, w))
    e_net = np.linalg.norm(out["net_flow_f"] - gt, axis=-1) * valid
    e_ref = np.linalg.norm(out["flow_f"] - gt, axis=-1) * valid
    means = {"network": float(e_net[valid].mean()), "refined": float(e_ref[valid].mean())}
    fig, ax = plt.subplots(2, 2, figsize=(10, 8.6))
    ax[0, 0].imshow(left)
    ax[0, 0].set_title("Aloe (left view), 576x499")
    for a, e, name in ((ax[0, 1], e_net, "network"), (ax[1, 0], e_ref, "refined")):
        im = a.imshow(e, cmap="magma", vmin=0, vmax=10)
        a.set_title(f"{name}: endpoint error, mean {means[name]:.2f} px")
        fig.colorbar(im, ax=a, fraction=0.04, label="px")
    im = ax[1, 1].imshow(out["weights_f"], cmap="gray", vmin=0, vmax=1)
    ax[1, 1].set_title("refinement's robust weights (dark: outliers)")
    fig.colorbar(im, ax=ax[1, 1], fraction=0.04)
    for a in ax.ravel():
        a.set_axis_off()
    fig.tight_layout()
    fig.savefig(out_path, dpi=80)
    plt.close(fig)
    return means
