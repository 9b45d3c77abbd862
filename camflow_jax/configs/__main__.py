"""``python -m camflow_jax.configs NAME`` prints the path of a packaged config file (for
``--config=``); without NAME it lists them."""

import sys

from camflow_jax import configs


def main(argv) -> int:
    if len(argv) != 1 or argv[0] not in configs.names():
        print(f"usage: python -m camflow_jax.configs NAME  (NAME: {', '.join(configs.names())})", file=sys.stderr)
        return 2
    print(configs.path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
