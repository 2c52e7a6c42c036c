"""tools/test.py's open-set answers: verification metrics, DIR@FAR with held-out identities, and a
test set from your own query and gallery folders."""
import json
import os
import shutil

import numpy as np
import pytest

from reid.cli import test as cli_test
from tests.cli.test_cli import trained_run  # noqa: F401  (the module-scoped trained demo run)

pytestmark = pytest.mark.slow


def test_verification_and_open_set_are_printed_and_saved(trained_run, tmp_path, capsys):  # noqa: F811
    _, out = trained_run
    assert cli_test.main(["--run", str(out), "--verification", "--open-set", "1", "--rerank",
                          "--output-dir", str(tmp_path), "TEST.RERANK.K1", "4", "TEST.RERANK.K2", "2"]) == 0
    printed = capsys.readouterr().out
    assert "TAR@0.01" in printed and "EER" in printed and "DIR@0.001" in printed and "known/unknown" in printed
    report = json.loads((tmp_path / "metrics.json").read_text())
    assert report["settings"]["fars"] == [0.01, 0.001, 0.0001]
    assert report["settings"]["open_set"] == {"holdout_ids": 1, "seed": 0}
    for row in ("plain", "rerank"):
        v = report["verification"]["synthetic"][row]
        assert set(v["tar"]) == {"0.01", "0.001", "0.0001"} and 0 <= v["eer"] <= 1
        assert len(v["roc"]["far"]) == len(v["roc"]["tar"]) == len(v["roc"]["threshold"]) > 5
        o = report["open_set"]["synthetic"][row]
        assert o["num_unknown"] > 0 and o["num_known"] > 0 and all(d <= o["rank1"] for d in o["dir"].values())


def test_your_own_query_and_gallery_folders(trained_run, tmp_path, capsys):  # noqa: F811
    base, out = trained_run
    images = sorted((base / "data" / "synthetic").rglob("*.jpg"))[:40]
    for i, path in enumerate(images):  # two identities by file order, one side each but for the overlap
        ident = "p%d" % (i % 2)
        side = "query" if i < 8 else "gallery"
        (tmp_path / side / ident).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, tmp_path / side / ident / path.name)
    assert cli_test.main(["--run", str(out), "--query", str(tmp_path / "query"), "--gallery",
                          str(tmp_path / "gallery"), "--output-dir", str(tmp_path / "res")]) == 0
    report = json.loads((tmp_path / "res" / "metrics.json").read_text())
    assert report["results"]["folders"]["plain"]["num_valid_queries"] == 8
    assert report["query_files_in_gallery"]["folders"]["count"] == 0
    # The query files again in the gallery, as hard links under other names: the same numbers.
    for ident in ("p0", "p1"):
        for k, q in enumerate(sorted((tmp_path / "query" / ident).iterdir())):
            os.link(q, tmp_path / "gallery" / ident / f"again_{k}.jpg")
    assert cli_test.main(["--run", str(out), "--query", str(tmp_path / "query"), "--gallery",
                          str(tmp_path / "gallery"), "--output-dir", str(tmp_path / "res2"),
                          "--save-features", str(tmp_path / "f.npz")]) == 0
    linked = json.loads((tmp_path / "res2" / "metrics.json").read_text())
    assert linked["query_files_in_gallery"]["folders"] == {"count": 8, "same_file": 8, "identical_bytes": 0,
                                                           "removed_from_gallery": 0}
    # Rank-1 computed here: the nearest gallery image that is not the query's own file (os.path.samefile),
    # equal distances in gallery order. Before: 1.0, every query found itself.
    from reid.evaluation import compute_distance
    from reid.evaluation.feature_io import load_features

    q, g = load_features(str(tmp_path / "f.npz"))
    d = np.asarray(compute_distance(q.feats, g.feats, metric="cosine"))
    hits = []
    for i, path in enumerate(q.paths):
        others = [j for j, other in enumerate(g.paths) if not os.path.samefile(path, other)]
        hits.append(g.pids[others[int(np.argmin(d[i, others]))]] == q.pids[i])
    assert linked["results"]["folders"]["plain"]["cmc"][0] == pytest.approx(np.mean(hits), abs=1e-6)
    with pytest.raises(SystemExit):
        cli_test.main(["--run", str(out), "--query", str(tmp_path / "query")])
    assert "--query and --gallery go together" in capsys.readouterr().err


def test_bad_open_set_settings_are_one_line(trained_run, tmp_path, capsys):  # noqa: F811
    _, out = trained_run
    assert cli_test.main(["--run", str(out), "--verification", "--output-dir", str(tmp_path),
                          "TEST.VERIFICATION.FARS", "[0.5, 2.0]"]) == 1
    assert "must lie in (0, 1)" in capsys.readouterr().err
    assert cli_test.main(["--run", str(out), "--open-set", "50", "--output-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "Cannot hold out 50 identities" in err and len(err.strip().splitlines()) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli_test.main(["--run", str(out), "--query", str(empty), "--gallery", str(empty),
                          "--output-dir", str(tmp_path / "r2")]) == 1
    assert "no images in identity sub-folders" in capsys.readouterr().err


def test_a_run_with_a_validation_split_calibrates_thresholds_that_search_and_export_use(tmp_path, capsys):
    from reid.cli import export as cli_export
    from reid.cli import extract as cli_extract
    from reid.cli import search as cli_search
    from reid.cli import train as cli_train
    from tests.cli.test_cli import DEMO, tiny_opts

    out = tmp_path / "run"
    opts = tiny_opts(tmp_path / "data", out)
    opts[opts.index("DATASETS.SYNTHETIC.NUM_TRAIN_IDS") + 1] = "8"
    assert cli_train.main(["--config-file", DEMO] + opts + ["TEST.VAL_IDS", "3", "TEST.VERIFICATION.FARS",
                                                            "[0.2, 0.01, 0.0001]"]) == 0
    record = json.loads((out / "thresholds.json").read_text())
    # 3 validation identities give 18 impostor pairs: enough to show FAR 0.2 (14 needed), not 0.01 or 1e-4.
    assert record["num_impostor"] == 18 and record["num_identities"] == 3
    assert set(record["thresholds"]) == {"0.2"} and set(record["unresolved"]) == {"0.01", "0.0001"}
    assert "validation split: 3 identities" in record["source"]
    log = (out / "log.txt").read_text()
    assert "Thresholds calibrated on the validation split" in log
    assert "No threshold at FAR 0.0001: its validation split had 18 impostor pairs" in log
    crops = sorted((tmp_path / "data" / "synthetic").rglob("*.jpg"))[:12]
    listing = tmp_path / "crops.txt"
    listing.write_text("\n".join(str(p) for p in crops[:-1]) + "\n")  # the last crop stays out of the gallery
    assert cli_extract.main(["--run", str(out), "--input", str(listing), "--output", str(tmp_path / "g.npz"),
                             "--num-workers", "0", "--quiet"]) == 0
    capsys.readouterr()
    import cv2

    again = tmp_path / "crop0_again.png"  # crops[0]'s pixels in another file (its own file is never its match)
    cv2.imwrite(str(again), cv2.imread(str(crops[0])))
    assert cli_search.main(["--run", str(out), "--gallery", str(tmp_path / "g.npz"), "--query", str(again),
                            "--far", "0.2", "--json", str(tmp_path / "m.json"), "-k", "3"]) == 0
    assert "of 18 validation impostor pairs accepted, so the FAR is at most" in capsys.readouterr().out
    result = json.loads((tmp_path / "m.json").read_text())[0]
    assert result["threshold"] == pytest.approx(record["thresholds"]["0.2"]["similarity"])
    assert result["answer"] == "match" and result["matches"][0]["accepted"]  # the same pixels are in the gallery
    assert cli_search.main(["--run", str(out), "--gallery", str(tmp_path / "g.npz"), "--query", str(crops[-1]),
                            "--threshold", "0.9999", "--json", str(tmp_path / "none.json")]) == 0
    printed = capsys.readouterr().out
    assert "-> no match (best score" in printed, printed
    assert json.loads((tmp_path / "none.json").read_text())[0]["answer"] == "no match"
    assert cli_search.main(["--run", str(out), "--gallery", str(tmp_path / "g.npz"), "--query", str(crops[0]),
                            "--far", "0.001"]) == 1
    assert "has thresholds for FAR 0.2, not 0.001" in capsys.readouterr().err
    # The case: a FAR the validation split cannot resolve is never applied, whatever was asked at
    # calibration (before, the threshold of the 18 pairs' smallest distance was used without a word).
    for far in ("0.0001", "0.01"):
        assert cli_search.main(["--run", str(out), "--gallery", str(tmp_path / "g.npz"), "--query", str(crops[0]),
                                "--far", far]) == 1
        err = capsys.readouterr().err
        assert f"cannot resolve FAR {far}: its validation split had 18 impostor pairs" in err, err
        assert "more validation identities would give them (3 now" in err and len(err.splitlines()) == 1
    assert cli_export.main(["--run", str(out), "--output", str(tmp_path / "m.pt2"), "--no-check"]) == 0
    import zipfile
    with zipfile.ZipFile(tmp_path / "m.pt2") as zf:
        meta = json.loads(zf.read(next(n for n in zf.namelist() if n.endswith("circle_reid.json"))))
    assert meta["decision_thresholds"]["thresholds"] == record["thresholds"]  # FAR 0.2 only
    assert meta["decision_thresholds"]["unresolved"] == record["unresolved"]
    assert meta["weights_file"] == record["weights"] and meta["weights_sha256"].startswith("sha256:")
    # Other weights of the same run: the thresholds measured on the run's result do not hold for them.
    import shutil

    other = out / "model_other.pth"
    shutil.copy(out / record["weights"], other)
    try:
        assert cli_search.main(["--run", str(out), "--weights", str(other), "--gallery", str(tmp_path / "g.npz"),
                                "--query", str(crops[0]), "--far", "0.2"]) == 1
        err = capsys.readouterr().err
        assert f"was calibrated on {record['weights']}, not on model_other.pth" in err and "--threshold" in err
        assert cli_export.main(["--run", str(out), "--weights", str(other), "--output", str(tmp_path / "o.pt2"),
                                "--no-check"]) == 0
        assert "its thresholds are not stored" in capsys.readouterr().out
        with zipfile.ZipFile(tmp_path / "o.pt2") as zf:
            meta = json.loads(zf.read(next(n for n in zf.namelist() if n.endswith("circle_reid.json"))))
        assert "decision_thresholds" not in meta
    finally:
        other.unlink()


def test_far_without_a_calibrated_run_says_what_to_do(trained_run, tmp_path, capsys):  # noqa: F811
    _, out = trained_run
    assert cli_search_main(["--run", str(out), "--gallery", str(tmp_path / "g.npz"), "--query", str(out),
                            "--far", "0.01"]) == 1
    err = capsys.readouterr().err
    assert "no calibrated thresholds next to" in err and "TEST.VAL_IDS > 0" in err and "--threshold" in err


def cli_search_main(argv):
    from reid.cli import search as cli_search

    return cli_search.main(argv)


def test_plot_roc_from_metrics_json(trained_run, tmp_path):  # noqa: F811
    from reid.cli import plot as cli_plot

    _, out = trained_run
    assert cli_test.main(["--run", str(out), "--verification", "--rerank", "--output-dir", str(tmp_path / "t"),
                          "TEST.RERANK.K1", "4", "TEST.RERANK.K2", "2"]) == 0
    png = tmp_path / "roc.png"
    assert cli_plot.main(["roc", "--metrics", str(tmp_path / "t" / "metrics.json"), "-o", str(png)]) == 0
    assert png.stat().st_size > 1000
    data = json.loads(png.with_suffix(".json").read_text())
    report = json.loads((tmp_path / "t" / "metrics.json").read_text())["verification"]["synthetic"]
    assert set(data["curves"]) == {"plain", "rerank"}
    assert data["curves"]["plain"]["tar"] == report["plain"]["roc"]["tar"]
    assert cli_plot.main(["roc", "--metrics", str(out / "config.yaml"), "-o", str(png)]) == 1  # not JSON
