"""Files in and out: atomic writing (:mod:`.atomic`), one-line descriptions of expected failures
(:mod:`.errors`), images (:mod:`.images`: one reader, one error wording), ``.flo`` flow
files (:mod:`.flo`), video and frame-folder streams
(:mod:`.video`), pictures for people (:mod:`.viz`: flow colours, basis tiles) and the cores
this process may use (:mod:`.cpus`), which every thread and worker count follows.

Nothing is imported eagerly: ``from camflow_jax.io import atomic``.
"""
