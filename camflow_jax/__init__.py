"""camflow_jax: CamFlow+ camera-motion estimation with hybrid motion bases, in JAX/Flax.

Importing the package has no side effects (no device queries, no downloads); submodules are
imported explicitly: ``from camflow_jax import bases, geometry``.
"""

__version__ = "0.1.0"
