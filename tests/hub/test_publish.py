"""tools/publish.py: a run as a Hugging Face model repository that loads back with identical features,
from a folder and from huggingface_hub's cache; its card carries the run's numbers; --push uploads."""
import json
import os
import shutil

import numpy as np
import pytest
import yaml

from reid.cli import extract as cli_extract
from reid.cli import publish as cli_publish

SMALL = ["MODEL.DEVICE", "cpu"]


def _feats(argv, out):
    assert cli_extract.main(argv + ["--output", str(out)] + SMALL) == 0
    return np.load(out)["feats"]


def _last_eval(run):
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["type"] == "eval"][-1]


@pytest.mark.slow
def test_a_published_run_loads_back_with_identical_features(demo_weights, tmp_path, monkeypatch):
    weights, images = demo_weights
    run = weights.parent
    out = tmp_path / "published"
    assert cli_publish.main(["--run", str(run), "--output", str(out), "--name", "me/demo-reid"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.yaml", "model.safetensors", "reid_config.json"]
    info = json.loads((out / "reid_config.json").read_text())
    assert info["format"] == "circle-reid" and info["input_size"] == [32, 16] and info["feature_dim"] > 0
    assert info["files"] == {"weights": "model.safetensors", "config": "config.yaml"}
    # the card: the Hub's metadata with the run's own numbers, the commands and the config
    card = (out / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    metrics = {m["type"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    last = _last_eval(run)
    assert metrics["rank-1"] == pytest.approx(round(last["R-1"], 2)) and metrics["mAP"] == pytest.approx(round(last["mAP"], 2))
    assert meta["library_name"] == "circle-reid" and meta["datasets"] == [last["dataset"]]
    assert f"| {last['dataset']} | {last['R-1']:.2f} | {last['mAP']:.2f} |" in card
    assert "python tools/train.py --config-file config.yaml" in card and "MODEL:" in card
    assert "WEIGHTS: ''" in (out / "config.yaml").read_text()  # the trainer's file paths are not published
    # loads back: from the folder, identical to the run
    by_run = _feats(["--run", str(run), "--input", str(images)], tmp_path / "run.npz")
    by_folder = _feats(["--weights", str(out), "--input", str(images)], tmp_path / "folder.npz")
    np.testing.assert_array_equal(by_folder, by_run)
    # ... and from the Hub's cache, as after a push (HF_HUB_OFFLINE: no network)
    commit = "89abcdef0123456789abcdef0123456789abcdef"
    repo = tmp_path / "hf" / "hub" / "models--me--demo-reid"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(out, repo / "snapshots" / commit)
    import huggingface_hub.constants as hc

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    by_hub = _feats(["--weights", "hf://me/demo-reid", "--input", str(images)], tmp_path / "hub.npz")
    np.testing.assert_array_equal(by_hub, by_run)


@pytest.mark.slow
def test_publish_refuses_a_used_folder_and_pushes_with_huggingface_hub(demo_weights, tmp_path, monkeypatch, capsys):
    weights, _ = demo_weights
    run = weights.parent
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    assert cli_publish.main(["--run", str(run), "--output", str(used)]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and "is not empty" in err[0]
    assert sorted(p.name for p in used.iterdir()) == ["notes.txt"]
    calls = []

    class FakeApi:
        def create_repo(self, **kw):
            calls.append(("create", kw))
            return f"https://huggingface.co/{kw['repo_id']}"

        def upload_folder(self, **kw):
            calls.append(("upload", kw, sorted(os.listdir(kw["folder_path"]))))

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    out = tmp_path / "pushed"
    assert cli_publish.main(["--run", str(run), "--output", str(out), "--push", "me/demo-reid", "--private"]) == 0
    assert calls[0] == ("create", {"repo_id": "me/demo-reid", "repo_type": "model", "private": True, "exist_ok": True})
    assert calls[1][1]["repo_id"] == "me/demo-reid" and calls[1][1]["folder_path"] == str(out)
    assert calls[1][2] == ["README.md", "config.yaml", "model.safetensors", "reid_config.json"]
    assert "- name: me/demo-reid" in (out / "README.md").read_text()


def test_bad_repository_ids_are_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as e:
        cli_publish.main(["--run", "r", "--output", "o", "--push", "../../etc"])
    assert e.value.code == 2 and "is not a repository id" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_publish.main(["--run", "r", "--output", "o", "--private"])
    assert "--private goes with --push" in capsys.readouterr().err
