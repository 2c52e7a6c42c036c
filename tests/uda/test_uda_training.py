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
def test_camera_aware_adaptation_resumes_exactly_and_logs_its_health(data, tmp_path):
    from reid.cli import train as cli_train
    from tests.engine.stubs import assert_same_weights
    from tests.engine.test_user_hooks import StopAt

    cam = ["UDA.CAMERA_AWARE", "True", "UDA.CAMERA_NEIGHBOURS", "True", "UDA.EPS", "0.5"]
    assert cli_train.main(argv(data, tmp_path / "a", *cam), hooks=[StopAt()]) == 0
    clusters = _records(tmp_path / "a", "cluster")
    # one proxy per cluster and camera: more proxies than clusters on 2-5 cameras per person
    assert all(r["proxies"] > r["clusters"] for r in clusters)
    assert all(0 <= r["multi_camera_share"] <= 1 and r["eps"] == 0.5 and "feature_spread" in r for r in clusters)
    assert "nmi_previous" not in clusters[0] and all(0 <= r["nmi_previous"] <= 1 for r in clusters[1:])
    a = torch.load(tmp_path / "a" / "model_final.pth", weights_only=True)
    assert a["hooks"]["MemoryUpdate"]["memory"].shape[0] == clusters[-1]["proxies"]
    log = (tmp_path / "a" / "log.txt").read_text()
    assert "camera proxies)" in log and "of clusters multi-camera" in log

    assert cli_train.main(argv(data, tmp_path / "b", *cam), hooks=[StopAt(at=5)]) == 0
    rest = StopAt()
    assert cli_train.main(argv(data, tmp_path / "b", *cam, "--resume"), hooks=[rest]) == 0
    assert rest.steps == list(range(6, 10))
    assert "Epoch 2 resumes with its pseudo-labels from the checkpoint" in (tmp_path / "b" / "log.txt").read_text()
    b = torch.load(tmp_path / "b" / "model_final.pth", weights_only=True)
    assert_same_weights(a["model"], b["model"])
    assert torch.equal(a["hooks"]["MemoryUpdate"]["memory"], b["hooks"]["MemoryUpdate"]["memory"])
    assert a["hooks"]["ClusterEachEpoch"]["history"] == b["hooks"]["ClusterEachEpoch"]["history"]


@pytest.mark.slow
@pytest.mark.parametrize("extra, message", [
    (["UDA.EPS", "0.01", "UDA.MIN_SAMPLES", "4"], "found no cluster: every image is an outlier at UDA.EPS 0.01"),
    (["SOLVER.IMS_PER_BATCH", "64", "DATALOADER.NUM_INSTANCE", "4"],
     "The training set has 60 images, fewer than one batch (SOLVER.IMS_PER_BATCH 64)"),
    (["UDA.EPS", "0.99", "UDA.MIN_SAMPLES", "2"], "Lower UDA.EPS"),  # one cluster of everyone: not "raise"
    (["MODEL.LOSSES.NAMES", "[triplet]"], "lacks 'identity': add it"),
    (["UDA.TEMPERATURE", "0"], "UDA.TEMPERATURE must be > 0"),
    (["UDA.MOMENTUM", "1.5"], "UDA.MOMENTUM must lie in [0, 1)"),
    (["UDA.MEMORY_UPDATE", "foo"], "UDA.MEMORY_UPDATE 'foo' is not one of: mean, hard"),
    (["UDA.EPS", "auto"], "UDA.EPS auto reads the radius from how the cluster count changes with it, which 60 "
                          "training images are too few to show"),
    (["UDA.CAMERA_AWARE", "True", "MODEL.LOSSES.NAMES", "[identity, triplet]"],
     "UDA.CAMERA_AWARE trains on camera proxies, so MODEL.LOSSES.NAMES ['triplet']"),
    (["UDA.CAMERA_AWARE", "True", "UDA.CAMERA_HARD_NEGATIVES", "0"], "UDA.CAMERA_HARD_NEGATIVES must be >= 1"),
    (["UDA.CAMERA_AWARE", "True", "MODEL.LOSSES.ID.LABEL_SMOOTH", "0.1"], "MODEL.LOSSES.ID.LABEL_SMOOTH is 0.1: set it"),
    (["UDA.CAMERA_NEIGHBOURS", "True", "DATASETS.NAMES", "[synthetic, unlabelled]", "DATASETS.UNLABELLED.DIR", "."],
     "UDA.CAMERA_NEIGHBOURS needs the camera of every training image from at least two cameras, but DATASETS.NAMES "
     "['synthetic', 'unlabelled'] has 2 training datasets"),
    (["DATASETS.UNLABELLED.DIR", "crops"], "DATASETS.UNLABELLED.DIR 'crops' names unlabelled crops, but "
                                           "DATASETS.NAMES ['synthetic'] does not include 'unlabelled'"),
])
def test_what_cannot_train_is_one_line_naming_what_to_do(data, tmp_path, capsys, extra, message):
    from reid.cli import train as cli_train

    assert cli_train.main(argv(data, tmp_path / "run", *extra)) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "run" / "model_final.pth").exists()  # never a silent epoch without training


def _crops(data, folder, camera=None):
    """The tiny synthetic training images as unlabelled crops named ``frame<i>_cam<c>.jpg`` (c:
    their camera, or `camera` for all)."""
    import shutil

    from reid.data import build_dataset

    ds = build_dataset("synthetic", str(data), num_train_ids=10, num_test_ids=3, num_cameras=2, images_per_camera=3,
                       num_distractors=0, image_size=(64, 32))
    folder.mkdir()
    for i, (path, _, cam) in enumerate(ds.train):  # names without identities, camera in the name
        shutil.copy(path, folder / f"frame{i:04d}_cam{(cam + 1) if camera is None else camera}.jpg")
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("regex, camera, message", [
    ("", None, "UDA.CAMERA_AWARE needs the camera of every training image from at least two cameras, but dataset "
               "'unlabelled' has no camera ids (set DATASETS.UNLABELLED.CAMERA_REGEX"),
    (r"_cam(\d+)", 1, "UDA.CAMERA_AWARE needs the camera of every training image from at least two cameras, but all "
                      "60 training images come from one camera"),
])
def test_camera_aware_without_cameras_is_one_line(data, tmp_path, capsys, regex, camera, message):
    from reid.cli import train as cli_train

    crops = _crops(data, tmp_path / "crops", camera)
    extra = ["DATASETS.NAMES", "[unlabelled]", "DATASETS.UNLABELLED.DIR", str(crops), "DATASETS.TESTS", "[]",
             "DATASETS.UNLABELLED.CAMERA_REGEX", regex, "UDA.CAMERA_AWARE", "True"]
    assert cli_train.main(argv(data, tmp_path / "run", *extra)) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and message in err[0], err


@pytest.mark.slow
def test_camera_options_auto_follow_the_data(data, tmp_path):
    """The shipped configs set UDA.CAMERA_AWARE / CAMERA_NEIGHBOURS auto: on when the crops have camera ids
    from two cameras (camera proxies in the memory), off with one line each when they have none."""
    from reid.cli import train as cli_train

    crops = _crops(data, tmp_path / "crops")
    base = ["DATASETS.NAMES", "[unlabelled]", "DATASETS.UNLABELLED.DIR", str(crops), "DATASETS.TESTS", "[]",
            "UDA.CAMERA_AWARE", "auto", "UDA.CAMERA_NEIGHBOURS", "auto", "SOLVER.MAX_EPOCH", "1"]
    assert cli_train.main(argv(data, tmp_path / "off", *base)) == 0
    log = (tmp_path / "off" / "log.txt").read_text().splitlines()
    for key, falls_back in (("CAMERA_AWARE", "memory"), ("CAMERA_NEIGHBOURS", "neighbours")):
        lines = [line for line in log if f"UDA.{key} auto: off" in line]
        assert len(lines) == 1 and "dataset 'unlabelled' has no camera ids" in lines[0], lines
        assert f"falls back to camera-agnostic {falls_back}" in lines[0]
    (record,) = _records(tmp_path / "off", "cluster")
    assert "proxies" not in record
    with_ids = base + ["DATASETS.UNLABELLED.CAMERA_REGEX", r"_cam(\d+)"]
    assert cli_train.main(argv(data, tmp_path / "on", *with_ids)) == 0
    assert "auto: off" not in (tmp_path / "on" / "log.txt").read_text()
    (record,) = _records(tmp_path / "on", "cluster")
    assert record["proxies"] > record["clusters"]  # clusters split by camera: the camera-aware memory
    assert {"seconds_extract", "seconds_distance", "seconds_radius", "seconds_dbscan", "seconds_memory"} <= set(record)


@pytest.mark.slow
def test_unlabelled_folder_trains_and_logs_no_purity(data, tmp_path, capsys):
    from reid.cli import train as cli_train

    crops = _crops(data, tmp_path / "crops")
    extra = ["DATASETS.NAMES", "[unlabelled]", "DATASETS.UNLABELLED.DIR", str(crops),
             "DATASETS.UNLABELLED.CAMERA_REGEX", r"_cam(\d+)", "SOLVER.MAX_EPOCH", "1"]
    assert cli_train.main(argv(data, tmp_path / "run", *extra, "DATASETS.TESTS", "[]")) == 0
    (record,) = _records(tmp_path / "run", "cluster")
    assert record["images"] == 60 and "ari" not in record and "true_ids" not in record
    # Crops without labels and no test set: testing the run says what is missing (it used to
    # print nothing and claim a metrics.json it never wrote).
    from reid.cli import test as cli_test

    test_out = tmp_path / "test"
    assert cli_test.main(["--run", str(tmp_path / "run"), "--output-dir", str(test_out)]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and "DATASETS.TESTS is empty" in err[0] and "--query and --gallery" in err[0], err
    assert not (test_out / "metrics.json").exists()


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
    # The run's config names the source model (MODEL.WEIGHTS); evaluating the run means its own weights.
    assert cli_train.main(["--run", str(out), "--eval-only"]) == 0
    assert f"with {out / 'model_final.pth'}" in (out / "log.txt").read_text()


class _NarrowEpsAfterFirstEpoch:
    """A user hook that makes the second clustering fail (a radius no two images are within)."""

    def __new__(cls):
        from reid.engine import HookBase

        class Hook(HookBase):
            def after_epoch(self):
                import dataclasses

                from reid.uda import ClusterEachEpoch

                for hook in self.trainer.hooks:
                    if isinstance(hook, ClusterEachEpoch):
                        hook.settings = dataclasses.replace(hook.settings, eps=0.01, min_samples=4)

        return Hook()


@pytest.mark.slow
def test_clustering_that_fails_mid_run_keeps_the_trained_weights_for_resume(data, tmp_path, capsys):
    from reid.cli import train as cli_train
    from tests.engine.test_user_hooks import StopAt

    out = tmp_path / "run"
    opts = ["SOLVER.CHECKPOINT_PERIOD", "0"]
    assert cli_train.main(argv(data, out, *opts), hooks=[_NarrowEpsAfterFirstEpoch()]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    saved = out / "model_interrupted.pth"
    assert len(err) == 1 and "found no cluster" in err[0] and f"The weights trained so far are saved in {saved}" in err[0]
    assert torch.load(saved, weights_only=True)["iteration"] == 3  # the first epoch's 3 steps are kept
    rest = StopAt()
    assert cli_train.main(argv(data, out, *opts, "--resume"), hooks=[rest]) == 0
    assert rest.steps == list(range(4, 10)) and (out / "model_final.pth").exists()


@pytest.mark.slow
def test_the_memory_is_built_from_the_features_its_loss_sees_whatever_neck_feat_tests_with(data, tmp_path):
    from reid.config import load_config
    from reid.data import build_test_loader, build_train_data
    from reid.evaluation.extract import extract_features
    from reid.modeling import build_model
    from reid.uda import build_uda_training

    cfg = load_config(DEMO, tiny_opts(data, tmp_path / "run") + UDA + ["MODEL.HEADS.NECK_FEAT", "before",
                                                                        "MODEL.HEADS.NUM_CLASSES", "0"])
    train = build_train_data(cfg, labels_required=False)
    model = build_model(cfg)
    with torch.no_grad():  # a trained neck: its output is not a rescaled copy of its input
        model.neck.running_mean.uniform_(-1, 1)
        model.neck.weight.uniform_(0.5, 2)
    _, hooks = build_uda_training(cfg, train, model)
    feats = hooks[0].extract(model)
    assert model.neck_feat == "before"  # testing still uses the configured feature
    loader = build_test_loader(cfg, [(p, -1, c) for p, _, c in train.items], [])
    model.neck_feat = "after"
    after = extract_features(model, loader, torch.device("cpu")).feats
    model.neck_feat = "before"
    before = extract_features(model, loader, torch.device("cpu")).feats
    torch.testing.assert_close(feats, after)
    assert (feats - before).abs().max() > 0.1


@pytest.mark.slow
def test_clustering_in_onnx_runtime_resumes_exactly_and_says_so(data, tmp_path):
    """UDA.EXTRACT_RUNTIME onnxruntime: every epoch's features come from the weights exported then, and a
    run stopped mid-epoch and resumed ends with the uninterrupted run's weights, labels and memory."""
    for package in ("onnxruntime", "onnx", "onnxscript"):  # the export extra (not in the minimum lane)
        pytest.importorskip(package)
    from reid.cli import train as cli_train
    from tests.engine.stubs import assert_same_weights
    from tests.engine.test_user_hooks import StopAt

    ort = ["UDA.EXTRACT_RUNTIME", "onnxruntime", "TEST.FLIP", "False"]
    assert cli_train.main(argv(data, tmp_path / "a", *ort)) == 0
    assert "Clustering extracts features with ONNX Runtime (UDA.EXTRACT_RUNTIME onnxruntime)" in \
        (tmp_path / "a" / "log.txt").read_text()
    assert cli_train.main(argv(data, tmp_path / "b", *ort), hooks=[StopAt(at=5)]) == 0
    assert cli_train.main(argv(data, tmp_path / "b", *ort, "--resume")) == 0
    a = torch.load(tmp_path / "a" / "model_final.pth", weights_only=True)
    b = torch.load(tmp_path / "b" / "model_final.pth", weights_only=True)
    assert_same_weights(a["model"], b["model"])
    assert torch.equal(a["hooks"]["ClusterEachEpoch"]["labels"], b["hooks"]["ClusterEachEpoch"]["labels"])
    assert torch.equal(a["hooks"]["MemoryUpdate"]["memory"], b["hooks"]["MemoryUpdate"]["memory"])
    # the same run in PyTorch clusters alike (features equal to ~1e-7)
    assert cli_train.main(argv(data, tmp_path / "c", "UDA.EXTRACT_RUNTIME", "torch", "TEST.FLIP", "False")) == 0
    clusters = [[r["clusters"], r["images_kept"]] for r in _records(tmp_path / "a", "cluster")]
    assert clusters == [[r["clusters"], r["images_kept"]] for r in _records(tmp_path / "c", "cluster")]
