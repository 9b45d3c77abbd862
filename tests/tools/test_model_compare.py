"""tools/bench/model_compare.py: the shipping rule's comparison. Its readers are checked on the
result files behind docs/refinement.md's table (the numbers the docs print are the oracle), its
verdict on hand-made tables, and one small end-to-end run (slow tier)."""

import json
import shutil

import pytest

from helpers import ROOT
from tools.bench import model_compare as mc

RESULTS = ROOT / "docs" / "refinement" / "results"


def test_the_readers_give_the_numbers_the_docs_print(tmp_path):
    (tmp_path / "synthetic").mkdir()
    shutil.copy(RESULTS / "synthetic_depth_r11_cauchy.json", tmp_path / "synthetic" / "results.json")
    (tmp_path / "no_depth").mkdir()
    shutil.copy(RESULTS / "synthetic_no_depth_r11_cauchy.json", tmp_path / "no_depth" / "results.json")
    shutil.copy(RESULTS / "homography_pairs_r11_cauchy.json", tmp_path / "homography.json")
    (tmp_path / "aloe").mkdir()
    shutil.copy(RESULTS / "eval_real.json", tmp_path / "aloe" / "results.json")  # 23 Nov: every method
    table = {}
    for part in mc.PARTS:
        table.update(mc.read(part, tmp_path))
    r = lambda x: round(x, 2)  # noqa: E731
    assert r(table["synthetic, with depth"]["refined"]) == 0.21 and r(table["synthetic, with depth"]["alone"]) == 7.18
    assert r(table["synthetic, with depth"]["refined LL"]) == 0.23
    assert r(table["synthetic, without depth"]["refined"]) == 2.54
    assert round(table["pure homographies (30 pairs)"]["refined"], 3) == 0.019
    # the model card's Aloe row: alone 11.31 / 16.96, refined before ESM 0.54 / 11.86
    assert r(table["Aloe, with depth"]["alone"]) == 11.31 and r(table["Aloe, without depth"]["alone"]) == 16.96
    assert r(table["Aloe, with depth"]["refined"]) == 0.54 and r(table["Aloe, without depth"]["refined"]) == 11.86


def test_the_verdict_follows_the_shipping_rule():
    ref = {"synthetic, with depth": {"alone": 8.61, "refined": 0.21},  # as of 27 Nov
           "synthetic, without depth": {"alone": 8.59, "refined": 2.54},
           "Aloe, with depth": {"alone": 11.31, "refined": 0.332},
           "Aloe, without depth": {"alone": 16.96, "refined": 6.96}}
    # the H200 run of 27 Nov: better alone on the synthetic benchmark, worse refined on Aloe
    h200 = {"synthetic, with depth": {"alone": 8.23, "refined": 0.20},
            "synthetic, without depth": {"alone": 9.07, "refined": 2.53},
            "Aloe, with depth": {"alone": 14.46, "refined": 0.339},
            "Aloe, without depth": {"alone": 19.91, "refined": 7.25}}
    v = mc.verdict(ref, h200)
    assert v["better_alone"] and not v["ships"]
    assert v["worse_refined"] == ["Aloe, with depth", "Aloe, without depth"]
    met = {(t["row"], t["column"]): t["met"] for t in v["targets"]}
    assert met == {("synthetic, with depth", "alone"): False, ("synthetic, without depth", "refined"): False,
                   ("Aloe, without depth", "refined"): False, ("synthetic, with depth", "refined"): True}
    good = {k: {"alone": x["alone"] / 2, "refined": x["refined"] + 0.004} for k, x in ref.items()}
    v = mc.verdict(ref, good)
    assert v["ships"] and v["worse_refined"] == []
    same = mc.verdict(ref, ref)
    assert not same["better_alone"] and not same["ships"]  # strictly better alone
    partial = mc.verdict(ref, {"synthetic, with depth": {"alone": 3.0, "refined": 0.2}})
    assert [t["met"] for t in partial["targets"]] == [True, None, None, True]
    assert "ships: **no**" in mc.markdown(ref, h200, mc.verdict(ref, h200), ("a", "b"))


def test_bad_arguments_are_refused_in_one_line(tmp_path, capsys):
    for argv, msg in ((["--candidate", str(tmp_path), "--out", str(tmp_path), "--parts", "nope"], "unknown nope"),
                      (["--candidate", str(tmp_path / "absent"), "--out", str(tmp_path)], "no such folder"),
                      (["--candidate", str(tmp_path), "--out", str(tmp_path), "--num", "101"], "100 pairs")):
        with pytest.raises(SystemExit) as e:
            mc.main(argv)
        assert e.value.code == 2 and msg in capsys.readouterr().err


@pytest.mark.slow  # two models x (2 synthetic pairs + 2 homography pairs): about 40 s on 2 cores
def test_the_shipped_model_against_itself_is_not_better_and_no_worse(tmp_path):
    from camflow_jax.models import checkpoint

    out = tmp_path / "cmp"
    rc = mc.main(["--candidate", str(checkpoint.pretrained_path()), "--out", str(out),
                  "--parts", "synthetic,homography", "--num", "2"])
    assert rc == 0
    got = json.loads((out / "compare.json").read_text())
    assert got["tables"]["reference"] == got["tables"]["candidate"]
    assert set(got["tables"]["candidate"]) == {"synthetic, with depth", "pure homographies (2 pairs)"}
    assert not got["verdict"]["ships"] and got["verdict"]["worse_refined"] == []
    assert (out / "compare.md").read_text().startswith("| | reference (shipped)")
