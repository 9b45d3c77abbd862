"""Draws docs/images/refinement_aloe.png (needs Debian's opencv-doc: apt-get install opencv-doc).

    python -m tools.bench figure_refinement [--data DIR] [-o PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from camflow_jax.compilation import cache
from tools.bench import figures, opencv_doc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=opencv_doc.OPENCV_DOC)
    p.add_argument("-o", "--out", default="docs/images/refinement_aloe.png")
    args = p.parse_args(argv)
    cache.enable()  # compiled programs kept per user (docs/performance.md, "Compile once")
    if not (Path(args.data) / opencv_doc.STEREO_FILES[0]).exists():
        print(f"error: {args.data}: {opencv_doc.MISSING_DATA}", file=sys.stderr)
        return 2
    means = figures.refinement_figure(args.data, args.out)
    print(f"wrote {args.out}: mean EPE network {means['network']:.2f} px, refined {means['refined']:.2f} px")
    return 0


if __name__ == "__main__":
    sys.exit(main())
