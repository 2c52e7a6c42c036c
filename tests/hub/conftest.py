"""Shared by the hub tests: a tiny trained demo model and a few crops."""
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "configs", "Demo", "resnet18_circle.yml")


@pytest.fixture(scope="session")
def demo_weights(tmp_path_factory):
    from tests.cli.test_cli import tiny_opts
    from reid.cli import train as cli_train

    base = tmp_path_factory.mktemp("hubrun")
    assert cli_train.main(["--config-file", DEMO] + tiny_opts(base / "data", base / "run")) == 0
    images = base / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    import cv2

    for i in range(4):
        cv2.imwrite(str(images / f"{i}.jpg"), rng.integers(0, 255, (64, 32, 3), dtype=np.uint8))
    return base / "run" / "model_final.pth", images


