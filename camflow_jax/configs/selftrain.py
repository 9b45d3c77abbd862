"""Self-training on a folder of footage: rounds of label (the refined model) -> fine-tune -> relabel,
starting from the shipped model (or ``init_from``), each round scored on the last quarter of each
clip, which no round learns from (docs/adaptation.md, "Self-training rounds").

    python -m camflow_jax.train --config=configs/selftrain.py --workdir=workdirs/selftrain \
        --config.selftrain.footage=MY_FOOTAGE_DIR

Each round's model is ``WORKDIR/round_<r>`` and the last one ``WORKDIR`` itself (a checkpoint
that every tool takes with ``--checkpoint``); ``WORKDIR/selftrain.json`` holds every round's
report.
"""

from camflow_jax.configs import pretrained_cpu


def get_config():
    c = pretrained_cpu.get_config()  # the shipped model's architecture (the model adapted is init_from's)
    c.selftrain.rounds = 2
    return c
