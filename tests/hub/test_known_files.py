"""torchreid's published files with known hashes give torchreid's own features, through --weights NAME.

The reference is torchreid 0.2.5's own OSNet (its models/osnet.py from the source distribution, run
live: tests/_references.py), fed the same 256x128 crops as torchreid's FeatureExtractor feeds it
(RGB / 255, ImageNet mean and std); ours is the catalogue name loaded as every tool loads it. A
zoo-style file made from torchreid's own model with seeded weights runs the whole proof everywhere;
the two real files (osnet_x0_25 on Market-1501 and MSMT17) run it where they are in the cache
(``python tools/hub.py download torchreid/osnet_x0_25_market1501 torchreid/osnet_x0_25_msmt17``,
which needs Google Drive): elsewhere those two are skipped, saying how to run them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import os

import numpy as np
import pytest
import torch

from tests._references import torchreid_module

MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
REAL = {"torchreid/osnet_x0_25_market1501": 751, "torchreid/osnet_x0_25_msmt17": 1041}


def _crops(n=6, seed=0):
    """RGB uint8 crops at the model's 256x128 input size (no resize on either side)."""
    return np.random.default_rng(seed).integers(0, 256, (n, 256, 128, 3), dtype=np.uint8)


def _torchreid_features(state, classes, crops):
    """torchreid's own osnet_x0_25 with `state`, in eval mode, on `crops` as its FeatureExtractor feeds them."""
    osnet = torchreid_module("reid/models/osnet.py")
    model = osnet.osnet_x0_25(num_classes=classes, pretrained=False, loss="softmax")
    model.load_state_dict({k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()})
    x = torch.tensor(((crops / 255.0 - MEAN) / STD).transpose(0, 3, 1, 2), dtype=torch.float32)
    with torch.no_grad():
        return model.eval()(x).numpy()


def _our_features(name, crops):
    from reid.hub import resolve_weights
    from reid.inference.predictor import load_predictor

    found = resolve_weights(name)
    predictor = load_predictor(config_file=found.config, weights=found.path,
                               opts=["MODEL.DEVICE", "cpu", "TEST.FLIP", False])
    return predictor.extract_arrays(list(crops))


def _assert_same(ours, theirs):
    ours = ours / np.linalg.norm(ours, axis=1, keepdims=True)
    theirs = theirs / np.linalg.norm(theirs, axis=1, keepdims=True)
    assert float((ours * theirs).sum(1).min()) > 0.9999


@pytest.mark.slow
def test_a_zoo_style_file_of_torchreids_own_osnet_gives_its_features(tmp_path, monkeypatch):
    from reid.hub.catalogue import entry as catalogue_entry

    catalogue = importlib.import_module("reid.hub.catalogue")
    torch.manual_seed(0)
    osnet = torchreid_module("reid/models/osnet.py")
    reference = osnet.osnet_x0_25(num_classes=751, pretrained=False, loss="softmax")
    with torch.no_grad():  # trained-looking statistics, so that the BN layers matter
        for module in reference.modules():
            if isinstance(module, torch.nn.BatchNorm2d) or isinstance(module, torch.nn.BatchNorm1d):
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 1.5)
    state = {"module." + k: v for k, v in reference.state_dict().items()}  # as the zoo's DataParallel files
    home = tmp_path / "home"
    entry = catalogue_entry("torchreid/osnet_x0_25_market1501")
    path = home / "hub" / "torchreid" / entry.filename
    path.parent.mkdir(parents=True)
    torch.save(state, path)
    data = path.read_bytes()
    stand_in = dataclasses.replace(entry, sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    monkeypatch.setattr(catalogue, "ENTRIES", (stand_in,))
    monkeypatch.setenv("REID_HOME", str(home))
    monkeypatch.setenv("REID_OFFLINE", "1")  # from the cache, no request
    crops = _crops()
    _assert_same(_our_features(entry.name, crops), _torchreid_features(state, 751, crops))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REAL))
def test_the_published_files_with_known_hashes_give_torchreids_features(name, monkeypatch):
    from reid.hub.cache import cache_path
    from reid.hub.catalogue import entry as catalogue_entry

    entry = catalogue_entry(name)
    path = cache_path(entry.name, entry.filename)
    if not os.path.isfile(path):
        pytest.skip(f"{path} is not in the cache: `python tools/hub.py download {name}` fetches it (from Google "
                    "Drive), then this test runs the proof on the published file")
    monkeypatch.setenv("REID_OFFLINE", "1")
    assert entry.sha256 and hashlib.sha256(open(path, "rb").read()).hexdigest() == entry.sha256
    state = torch.load(path, map_location="cpu", weights_only=True)
    state = state.get("state_dict", state)
    crops = _crops(seed=1)
    _assert_same(_our_features(name, crops), _torchreid_features(state, REAL[name], crops))
