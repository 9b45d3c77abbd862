"""Camera-motion estimators behind one name registry.

* :mod:`.registry`: the single registry of estimator names (``get``, ``resolve``,
  ``describe``, ``Motion``, ...): the command lines, the benchmark and the stabilizer look
  names up there;
* :mod:`.base`: ``Motion``, the ``Estimator`` base class, ``check_pair`` (re-exported by the
  registry);
* :mod:`.classical`: the estimators without a model (identity, SIFT/ORB, KLT, ECC, DIS);
* :mod:`.camflow`: the CamFlow estimators (``camflow``, ``camflow_net``);
* :mod:`.outputs`: checking and writing one pair's results (what ``estimate`` writes).

Nothing is imported eagerly: ``from camflow_jax.estimators import registry``.
"""
