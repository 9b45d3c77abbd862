"""Training: ``train_and_evaluate(config, workdir)`` (:mod:`.loop`) and its pieces: the jitted,
sharded steps, optimizer and mesh (:mod:`.steps`), the train state and Orbax checkpoints
(:mod:`.state`), the losses (:mod:`.losses`), signals and graceful stops (:mod:`.signals`), the
workdir's lock and metric files (:mod:`.workdir`) and the held-out evaluation
(:mod:`.heldout`). The command line is ``python -m camflow_jax.train``.

Nothing is imported eagerly: ``from camflow_jax.training import loop``.
"""
