"""tools/test.py on a tiny VehicleID release of synthetic vehicles: the gallery-draws protocol is
picked up from the dataset, printed as mean +- std and written to metrics.json with every draw."""
import json
import os

import numpy as np
import pytest
import torch

from reid.cli import test as cli_test
from reid.config import load_config
from reid.engine.checkpoint_files import save_checkpoint
from reid.modeling import build_model

from tests.data.vehicle_files import synthetic_vehicles, write_vehicleid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "configs", "Demo", "vehicle_resnet18.yml")


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    base = tmp_path_factory.mktemp("vehicleid")
    write_vehicleid(base, synthetic_vehicles(base / "synthetic"))
    opts = ["MODEL.DEVICE", "cpu", "MODEL.HEADS.NUM_CLASSES", "0", "INPUT.SIZE_TEST", "[32, 32]"]
    torch.manual_seed(0)
    weights = save_checkpoint(str(base / "model.pth"), model=build_model(load_config(DEMO, opts)).state_dict())
    return base, weights


def test_test_tool_reports_the_mean_of_the_draws_and_every_draw(release, tmp_path, capsys):
    base, weights = release
    out = tmp_path / "test"
    rc = cli_test.main(["--config-file", DEMO, "--weights", weights, "--output-dir", str(out),
                        "DATASETS.TESTS", "[vehicleid]", "DATASETS.ROOT", str(base), "MODEL.DEVICE", "cpu",
                        "INPUT.SIZE_TEST", "[32, 32]", "DATALOADER.NUM_WORKERS", "0", "TEST.GALLERY_DRAWS", "5",
                        "--rerank", "TEST.RERANK.K1", "3", "TEST.RERANK.K2", "1"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "vehicleid: 14 images, mean +- std of 5 gallery draws (seed 0; each 11 query / 3 gallery images)" in printed
    assert "| plain " in printed and "| rerank " in printed and " +- " in printed
    report = json.loads((out / "metrics.json").read_text())
    draws = report["gallery_draws"]["vehicleid"]
    assert draws["num_draws"] == 5 and draws["seed"] == 0
    for row in ("plain", "rerank"):
        per_draw = draws["per_draw"][row]
        assert len(per_draw) == 5
        for key in ("R-1", "mAP", "mINP"):
            values = [d[key] for d in per_draw]
            assert report["results"]["vehicleid"][row][key] == pytest.approx(np.mean(values))
            assert draws["std"][row][key] == pytest.approx(np.std(values))
