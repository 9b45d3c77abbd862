"""Self-training and test-time adaptation: the refinement as the network's teacher
(docs/adaptation.md).

* :mod:`.footage`: frames of videos and frame folders, and the consecutive pairs to learn from;
* :mod:`.teacher`: labels of those pairs from the refined CamFlow+ (both directions, per-pixel
  weights from what the refinement trusts), cached on disk with checksums;
* :mod:`.finetune`: the network fine-tuned on the labels, mixed with synthetic pairs with exact
  labels, within a time budget, BatchNorm frozen;
* :mod:`.occluders`: moving patches pasted into footage pairs while fine-tuning, so that the
  network learns to ignore objects that move by themselves;
* :mod:`.run`: the whole ``adapt`` job (label, split, fine-tune, report, save a checkpoint that
  every tool accepts with ``--checkpoint``) and self-training rounds (label, train, relabel).

Nothing is imported eagerly: ``from camflow_jax.adaptation import run``.
"""
