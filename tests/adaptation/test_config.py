"""The adaptation's settings (camflow_jax.adaptation.config): the self-training config takes
adapt's values where it leaves a key None, and its own where it sets one."""

from camflow_jax import configs
from camflow_jax.adaptation.config import DEFAULT_MINUTES, AdaptConfig, selftrain_settings


def test_the_selftrain_config_takes_adapts_settings_unless_it_sets_its_own():
    st = configs.load("selftrain").selftrain
    assert all(st[k] is None for k in ("minutes", "learning_rate", "trainable", "synthetic_batch", "occluders"))
    minutes, kw = selftrain_settings(st)
    d = AdaptConfig()
    assert minutes == DEFAULT_MINUTES == 4.5
    assert kw == {"learning_rate": d.learning_rate, "trainable": d.trainable, "synthetic_batch": d.synthetic_batch,
                  "occluders": d.occluders} == {"learning_rate": 3e-4, "trainable": "all", "synthetic_batch": 2,
                                                "occluders": 0.0}
    st.minutes, st.learning_rate, st.synthetic_batch = 2.0, 1e-3, 0
    minutes, kw = selftrain_settings(st)
    assert (minutes, kw["learning_rate"], kw["synthetic_batch"], kw["trainable"]) == (2.0, 1e-3, 0, "all")
