"""Writes a trained model as compact package weights (``camflow_jax/models/weights/<name>``).

    python tools/export_pretrained.py WORKDIR [--name camflow_plus_synthetic] [-y]

Reads a training workdir (or any checkpoint :func:`camflow_jax.models.checkpoint.load_model` reads),
stores its arrays as 16-bit with a scale each (:func:`camflow_jax.models.checkpoint.save_compact`)
plus the run's config and summary, then checks the round trip: the flows of the 16-bit model
against the float32 one on held-out synthetic pairs (printed, and recorded in model.json).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # camflow_jax from this checkout, installed or not (an accelerator lease)
    sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workdir")
    p.add_argument("--name", default=None, help="folder name under camflow_jax/models/weights (default: the shipped model's)")
    p.add_argument("--out", default=None, help="output folder (default camflow_jax/models/weights/NAME)")
    p.add_argument("--pairs", type=int, default=4, help="held-out synthetic pairs for the round-trip check")
    p.add_argument("-y", "--overwrite", action="store_true")
    args = p.parse_args(argv)
    import numpy as np

    from camflow_jax.compilation import cache
    from camflow_jax.data.synthetic.scenes import SyntheticScenes
    from camflow_jax.models import checkpoint
    from camflow_jax.predictor import Predictor

    cache.enable()  # compiled programs kept per user (docs/performance.md, "Compile once")
    src = Path(args.workdir)
    try:
        model, variables, bases, model_config = checkpoint.load_model(src)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else checkpoint.WEIGHTS_DIR / (args.name or checkpoint.PRETRAINED)
    if (out / "model.json").exists() and not args.overwrite:
        print(f"error: {out} exists (-y to replace it)", file=sys.stderr)
        return 2
    info = {"source": src.name}
    for f in ("summary.json", "config.json"):
        if (src / f).is_file():
            info[f.split(".")[0]] = json.loads((src / f).read_text())
    if isinstance(info.get("summary"), dict):
        info["summary"].pop("eval", None)
    store_bases = bool((src / "arrays").is_dir() and model_config.get("bases") is None)
    checkpoint.save_compact(out, model_config, variables, bases if store_bases else None, info=info, overwrite=True)

    full = Predictor(model, variables, bases, model_config)
    compact = Predictor.from_checkpoint(out)
    h, w = int(model_config["height"]), int(model_config["width"])
    scenes = SyntheticScenes(seed=4242, num_samples=args.pairs, height=h, width=w)
    diffs = []
    for i in range(args.pairs):
        s = scenes[i]
        cam = {"depth1": s["depth1"], "depth2": s["depth2"], "intrinsics": s["K"]}
        # the network alone: what 16 bits change (refined, both would meet at the refinement's optimum)
        a = full(s["img1"], s["img2"], **cam, refine=False)["flow_f"]
        b = compact(s["img1"], s["img2"], **cam, refine=False)["flow_f"]
        diffs.append(float(np.mean(np.linalg.norm(np.asarray(a) - np.asarray(b), axis=-1))))
    meta = json.loads((out / "model.json").read_text())
    meta["info"]["compact_roundtrip_mean_flow_diff_px"] = max(diffs)
    (out / "model.json").write_text(json.dumps(meta, indent=2))
    size = (out / checkpoint.NPZ_FILE).stat().st_size
    print(f"wrote {out} ({size / 2**20:.2f} MiB); 16-bit vs float32 flows differ by at most "
          f"{max(diffs):.4f} px (mean endpoint, {args.pairs} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
