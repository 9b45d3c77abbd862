"""Procedural synthetic parallax scenes, the embedded default dataset (docs/synthetic.md).

* :mod:`.scenes`: scene and camera sampling, pair rendering with labels, ``SyntheticScenes``
  (its public names are re-exported here: ``from camflow_jax.data.synthetic import
  SyntheticScenes``);
* :mod:`.render`: planes, ray casting, shading and reprojection flow (numpy);
* :mod:`.appearance`: the five appearance categories; :mod:`.textures`: the texture bank;
* :mod:`.files`: pairs written to disk with a contact sheet;
* :mod:`.device` and :mod:`.device_sampling`: the same scenes rendered by JAX on the device
  (jitted, vmapped, sharded over a mesh's data axis), held to the numpy renderer by tests.
"""

from camflow_jax.data.synthetic.scenes import *  # noqa: F401,F403
from camflow_jax.data.synthetic.scenes import __all__  # noqa: F401
