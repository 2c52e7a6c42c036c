"""A timm ViT through the tools: train, test with re-ranking, extract (the README's flow)."""
import json

import numpy as np
import pytest

from reid.cli import extract as cli_extract
from reid.cli import test as cli_test
from reid.cli import train as cli_train
from tests.cli.test_cli import DEMO, tiny_opts


@pytest.mark.slow
def test_timm_vit_trains_tests_with_reranking_and_extracts(tmp_path):
    pytest.importorskip("timm", reason="timm backbones need timm (pip install 'circle-reid[timm]')")
    out = tmp_path / "run"
    opts = tiny_opts(tmp_path / "data", out) + ["MODEL.BACKBONE.NAME", "timm/test_vit", "MODEL.BACKBONE.DROP_PATH", "0.1",
                                                "MODEL.LOSSES.NAMES", "[identity,triplet]"]
    assert cli_train.main(["--config-file", DEMO] + opts) == 0
    config = (out / "config.yaml").read_text()
    assert "NAME: timm/test_vit" in config
    assert "backbone timm/test_vit" in (out / "log.txt").read_text()
    assert cli_test.main(["--run", str(out), "--rerank", "TEST.RERANK.K1", "4", "TEST.RERANK.K2", "2"]) == 0
    rows = json.loads((out / "test" / "metrics.json").read_text())["results"]["synthetic"]
    assert set(rows) == {"plain", "rerank"} and all(0 <= r["mAP"] <= 100 for r in rows.values())
    images = sorted((tmp_path / "data").rglob("*.jpg"))[:5]
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{p}\n" for p in images))
    assert cli_extract.main(["--run", str(out), "--input", str(listing), "--output", str(tmp_path / "f.npz"),
                             "--device", "cpu", "--quiet", "--num-workers", "0"]) == 0
    with np.load(tmp_path / "f.npz") as data:
        feats = data["feats"]
    assert feats.shape == (5, 64)  # test_vit's width
    np.testing.assert_allclose(np.linalg.norm(feats, axis=1), 1.0, atol=1e-5)
