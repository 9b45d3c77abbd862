"""Scripts and tools of the repository (not installed: setup.cfg installs camflow_jax only).

``tools/bench``: the measurements the docs report; the other files here are user tools run as
``python tools/NAME.py``.
"""
