"""Learning without labels end to end on tiny synthetic data: the loop, exact resume, errors."""
import json

import pytest
import torch

from tests.cli.test_cli import DEMO, tiny_opts

UDA = ["UDA.ENABLED", "True", "UDA.ITERS_PER_EPOCH", "3", "UDA.K1", "6", "UDA.K2", "2", "UDA.EPS", "0.7",
       "UDA.MIN_SAMPLES", "2", "SOLVER.MAX_EPOCH", "3", "TEST.EVAL_PERIOD", "0", "SOLVER.CHECKPOINT_PERIOD", "1",
       "DATASETS.SYNTHETIC.NUM_TRAIN_IDS", "10", "DATASETS.SYNTHETIC.IMAGES_PER_CAMERA", "3"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def argv(data, out, *extra):
    return ["--config-file", DEMO] + tiny_opts(data, out) + UDA + list(extra)


def _records(out, kind):
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["type"] == kind]


@pytest.mark.slow
def test_adaptation_resumes_exactly_mid_epoch_with_its_labels_and_memory(data, tmp_path):
    from reid.cli import train as cli_train
    from tests.engine.stubs import assert_same_weights
    from tests.engine.test_user_hooks import StopAt

    whole = StopAt()
    assert cli_train.main(argv(data, tmp_path / "a"), hooks=[whole]) == 0
    assert whole.steps == list(range(1, 10))  # UDA.ITERS_PER_EPOCH 3 x 3 epochs, whatever the clusters
    clusters = _records(tmp_path / "a", "cluster")
    assert [r["epoch"] for r in clusters] == [1, 2, 3]
    assert all(r["clusters"] >= 4 and 0 < r["images_kept"] <= r["images"] == 60 for r in clusters)
    # The synthetic images have identities: each clustering is scored (measurement only).
    assert all(-1 <= r["ari"] <= 1 and 0 <= r["pair_precision"] <= 1 and 0 <= r["pair_recall"] <= 1
               and r["true_ids"] == 10 for r in clusters)
    log = (tmp_path / "a" / "log.txt").read_text()
    assert "Clustering before epoch 2: " in log and "; ARI " in log and "pair precision" in log

    # Stopped in the middle of epoch 2 (step 5 of 9), then resumed in a new process state.
    assert cli_train.main(argv(data, tmp_path / "b"), hooks=[StopAt(at=5)]) == 0
    rest = StopAt()
    assert cli_train.main(argv(data, tmp_path / "b", "--resume"), hooks=[rest]) == 0
    assert rest.steps == list(range(6, 10))
    log = (tmp_path / "b" / "log.txt").read_text()
    assert "Epoch 2 resumes with its pseudo-labels from the checkpoint" in log
    a = torch.load(tmp_path / "a" / "model_final.pth", weights_only=True)
    b = torch.load(tmp_path / "b" / "model_final.pth", weights_only=True)
    assert_same_weights(a["model"], b["model"])
    assert a["hooks"]["ClusterEachEpoch"]["epoch"] == b["hooks"]["ClusterEachEpoch"]["epoch"] == 2
    assert torch.equal(a["hooks"]["ClusterEachEpoch"]["labels"], b["hooks"]["ClusterEachEpoch"]["labels"])
    assert torch.equal(a["hooks"]["MemoryUpdate"]["memory"], b["hooks"]["MemoryUpdate"]["memory"])
    assert [r["clusters"] for r in _records(tmp_path / "b", "cluster")] == [r["clusters"] for r in clusters]
    # The saved model is a plain one: no memory, no head; it loads for testing as any run.
    assert not any(k.startswith("head") for k in a["model"])


@pytest.mark.slow
@pytest.mark.parametrize("extra, message", [
    (["UDA.EPS", "0.01", "UDA.MIN_SAMPLES", "4"], "found no cluster: every image is an outlier at UDA.EPS 0.01"),
    (["SOLVER.IMS_PER_BATCH", "64", "DATALOADER.NUM_INSTANCE", "4"],
     "The training set has 60 images, fewer than one batch (SOLVER.IMS_PER_BATCH 64)"),
    (["MODEL.LOSSES.NAMES", "[triplet]"], "lacks 'identity': add it"),
])
def test_what_cannot_train_is_one_line_naming_what_to_do(data, tmp_path, capsys, extra, message):
    from reid.cli import train as cli_train

    assert cli_train.main(argv(data, tmp_path / "run", *extra)) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "run" / "model_final.pth").exists()  # never a silent epoch without training


@pytest.mark.slow
def test_unlabelled_folder_trains_and_logs_no_purity(data, tmp_path):
    import shutil

    from reid.cli import train as cli_train
    from reid.data import build_dataset

    ds = build_dataset("synthetic", str(data), num_train_ids=10, num_test_ids=3, num_cameras=2, images_per_camera=3,
                       num_distractors=0, image_size=(64, 32))
    crops = tmp_path / "crops"
    crops.mkdir()
    for i, (path, _, cam) in enumerate(ds.train):  # names without identities, camera in the name
        shutil.copy(path, crops / f"frame{i:04d}_cam{cam + 1}.jpg")
    extra = ["DATASETS.NAMES", "[unlabelled]", "DATASETS.UNLABELLED.DIR", str(crops),
             "DATASETS.UNLABELLED.CAMERA_REGEX", r"_cam(\d+)", "SOLVER.MAX_EPOCH", "1"]
    assert cli_train.main(argv(data, tmp_path / "run", *extra)) == 0
    (record,) = _records(tmp_path / "run", "cluster")
    assert record["images"] == 60 and "ari" not in record and "true_ids" not in record


@pytest.mark.slow
def test_adaptation_starts_from_a_supervised_run_with_another_head(data, tmp_path):
    from reid.cli import train as cli_train

    source = tmp_path / "source"
    assert cli_train.main(["--config-file", DEMO] + tiny_opts(data, source) + ["TEST.EVAL_PERIOD", "0"]) == 0
    weights = str(source / "model_final.pth")
    assert "head.weight" in torch.load(weights, weights_only=True)["model"]  # 5 training identities
    out = tmp_path / "adapted"
    assert cli_train.main(argv(data, out, "--weights", weights, "SOLVER.MAX_EPOCH", "1")) == 0
    log = (out / "log.txt").read_text()
    assert f"Loaded weights from {weights}" in log and "Clustering before epoch 1" in log
