"""``python -m camflow_jax.configs NAME`` prints the path of a packaged config file (for
``--config=``); without NAME it lists them."""

import sys
from pathlib import Path

from camflow_jax.configs import NAMES


def main(argv) -> int:
    if len(argv) != 1 or argv[0] not in NAMES:
        print(f"usage: python -m camflow_jax.configs NAME  (NAME: {', '.join(NAMES)})", file=sys.stderr)
        return 2
    print(Path(__file__).with_name(f"{argv[0]}.py"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
