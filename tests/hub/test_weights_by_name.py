"""``--weights NAME`` in the tools: a catalogue name fetched from a server on the loopback interface,
with the catalogue's config, offline from the cache afterwards; an ``hf://`` file from huggingface_hub's
cache layout with HF_HUB_OFFLINE=1; a pickle that would run code refused in one line."""
import hashlib
import importlib
import os
import pickle

import numpy as np
import pytest

from .file_server import FileServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "configs", "Demo", "resnet18_circle.yml")
SMALL = ["INPUT.SIZE_TEST", "[32, 16]", "MODEL.DEVICE", "cpu"]


def _entry(name, url, data, config="configs/Demo/resnet18_circle.yml"):
    from reid.hub.catalogue import HubEntry

    return HubEntry(name=name, family="bot", format="ours", config=config, filename=name.split("/")[1] + ".pth",
                    urls=(url,), dataset="synthetic", sha256=hashlib.sha256(data).hexdigest(), size=len(data))


def _extract(argv):
    from reid.cli import extract as cli_extract

    return cli_extract.main(argv)


@pytest.mark.slow
def test_a_catalogue_name_downloads_with_its_config_and_then_works_offline(demo_weights, tmp_path, monkeypatch, capsys):
    weights, images = demo_weights
    data = weights.read_bytes()
    monkeypatch.setenv("REID_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("REID_OFFLINE", raising=False)
    catalogue = importlib.import_module("reid.hub.catalogue")
    with FileServer() as server:
        server.files["/demo.pth"] = data
        monkeypatch.setattr(catalogue, "ENTRIES", (_entry("zoo/demo", server.url + "/demo.pth", data),))
        assert _extract(["--weights", "zoo/demo", "--input", str(images), "--output", str(tmp_path / "a.npz")] + SMALL) == 0
        assert len(server.requests) == 1
        # the same file named by its path with the same config gives the same features
        assert _extract(["--weights", str(weights), "--config-file", DEMO, "--input", str(images), "--output",
                         str(tmp_path / "b.npz")] + SMALL) == 0
        a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
        np.testing.assert_array_equal(a["feats"], b["feats"])
        # offline: from the cache, no request
        monkeypatch.setenv("REID_OFFLINE", "1")
        assert _extract(["--weights", "zoo/demo", "--input", str(images), "--output", str(tmp_path / "c.npz")] + SMALL) == 0
        assert len(server.requests) == 1
        np.testing.assert_array_equal(np.load(tmp_path / "c.npz")["feats"], a["feats"])


@pytest.mark.slow
def test_misspelt_and_missing_names_are_one_line(demo_weights, tmp_path, monkeypatch, capsys):
    _, images = demo_weights
    monkeypatch.setenv("REID_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("REID_OFFLINE", "1")
    catalogue = importlib.import_module("reid.hub.catalogue")
    monkeypatch.setattr(catalogue, "ENTRIES", (_entry("zoo/demo", "http://127.0.0.1:9/demo.pth", b"x"),))
    for name, expected in (("zoo/dmeo", "'zoo/dmeo' is not in the catalogue of published weights. Did you mean zoo/demo?"),
                           ("zoo/demo", "zoo/demo is not in the cache")):
        with pytest.raises(SystemExit) as e:
            _extract(["--weights", name, "--input", str(images), "--output", str(tmp_path / "x.npz")])
        assert e.value.code == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and expected in err[0], err
    assert not (tmp_path / "x.npz").exists()


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


@pytest.mark.slow
def test_a_pickle_that_would_run_code_is_refused(demo_weights, tmp_path, monkeypatch, capsys):
    _, images = demo_weights
    evil = pickle.dumps({"model": _RunsCode()})
    monkeypatch.setenv("REID_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("REID_OFFLINE", raising=False)
    monkeypatch.chdir(tmp_path)
    catalogue = importlib.import_module("reid.hub.catalogue")
    with FileServer() as server:
        server.files["/evil.pth"] = evil
        monkeypatch.setattr(catalogue, "ENTRIES", (_entry("zoo/evil", server.url + "/evil.pth", evil),))
        assert _extract(["--weights", "zoo/evil", "--input", str(images), "--output", str(tmp_path / "e.npz")] + SMALL) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and "weights_only" in err[0], err
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "e.npz").exists()


@pytest.mark.slow
def test_hf_file_from_the_hub_cache_offline(demo_weights, tmp_path, monkeypatch):
    weights, images = demo_weights
    # huggingface_hub's cache layout: models--ORG--REPO/{refs/main, snapshots/<commit>/<file>, blobs/<hash>}
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hf" / "hub" / "models--someone--demo-reid"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    blob = repo / "blobs" / hashlib.sha256(weights.read_bytes()).hexdigest()
    blob.parent.mkdir()
    blob.write_bytes(weights.read_bytes())
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "model_final.pth").symlink_to(os.path.relpath(blob, snap))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    assert _extract(["--weights", "hf://someone/demo-reid/model_final.pth", "--config-file", DEMO, "--input",
                     str(images), "--output", str(tmp_path / "h.npz")] + SMALL) == 0
    assert _extract(["--weights", str(weights), "--config-file", DEMO, "--input", str(images), "--output",
                     str(tmp_path / "p.npz")] + SMALL) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "h.npz")["feats"], np.load(tmp_path / "p.npz")["feats"])


def test_track_takes_several_published_models_each_with_its_own_config(tmp_path, monkeypatch, capsys):
    """Two catalogue models of different architectures, whose files store no config: tools/track.py
    loads each with its entry's config; a one-model tool refuses the mix in one line."""
    import torch

    from reid.cli import track as cli_track
    from reid.cli.model_args import check_model_arguments
    from reid.config import load_config
    from reid.engine.checkpoint_files import save_checkpoint
    from reid.modeling import build_model
    from reid.tracking.appearance import load_appearance_models

    monkeypatch.setenv("REID_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("REID_OFFLINE", raising=False)
    catalogue = importlib.import_module("reid.hub.catalogue")
    entries, data = [], {}
    with FileServer() as server:
        for arch in ("resnet18", "resnet34"):
            config = tmp_path / f"{arch}.yml"
            config.write_text(f"MODEL:\n  BACKBONE: {{NAME: {arch}, PRETRAINED: false}}\n  HEADS: {{NUM_CLASSES: 0}}\n"
                              "  DEVICE: cpu\nINPUT: {SIZE_TEST: [32, 16]}\nTEST: {FLIP: false}\n")
            torch.manual_seed(0)
            path = tmp_path / f"{arch}.pth"
            save_checkpoint(str(path), model=build_model(load_config(str(config))).state_dict())  # no config inside
            data[arch] = path.read_bytes()
            server.files[f"/{arch}.pth"] = data[arch]
            entries.append(_entry(f"zoo/{arch}", f"{server.url}/{arch}.pth", data[arch], config=str(config)))
        monkeypatch.setattr(catalogue, "ENTRIES", tuple(entries))
        parser = cli_track.build_parser()
        argv = ["--sequences", str(tmp_path), "--output", str(tmp_path / "out"), "--weights", "zoo/resnet18",
                "zoo/resnet34"]
        args = parser.parse_args(argv)
        check_model_arguments(parser, args, lists=("weights",), per_weights=True)
    assert sorted(args.weight_configs.values()) == [str(tmp_path / "resnet18.yml"), str(tmp_path / "resnet34.yml")]
    models = load_appearance_models(args.weights, weight_configs=args.weight_configs)
    assert [m.predictor.cfg.MODEL.BACKBONE.NAME for m in models] == ["resnet18", "resnet34"]
    assert [hashlib.sha256(open(m.weights, "rb").read()).hexdigest() for m in models] == [
        hashlib.sha256(data[a]).hexdigest() for a in ("resnet18", "resnet34")]
    # a tool that serves one config to every model of the command says why it cannot
    monkeypatch.setenv("REID_OFFLINE", "1")  # from the cache now
    args = parser.parse_args(argv)
    with pytest.raises(SystemExit) as stop:
        check_model_arguments(parser, args, lists=("weights",))
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 1 and "\n" not in err and "need different configs" in err
