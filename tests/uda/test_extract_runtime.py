"""The clustering's feature pass in ONNX Runtime (UDA.EXTRACT_RUNTIME, reid/uda/extract_runtime.py):
the same features as PyTorch, the model left as it was, the runtime named in one log line, and
PyTorch when ONNX Runtime cannot run."""
import logging
import sys

import pytest
import torch

from reid.inference.cluster_runtime import cluster_runtimes
from reid.uda.extract_runtime import AUTO_MIN_IMAGES, ClusterExtractor, ExtractRuntime, choose_runtime
from tests.cli.test_cli import DEMO, tiny_opts

UDA = ["UDA.ENABLED", "True", "UDA.K1", "6", "UDA.K2", "2", "UDA.EPS", "0.7", "UDA.MIN_SAMPLES", "2",
       "DATASETS.SYNTHETIC.NUM_TRAIN_IDS", "10", "DATASETS.SYNTHETIC.IMAGES_PER_CAMERA", "3",
       "MODEL.HEADS.NECK_FEAT", "before"]
LOGGER = "reid.uda.extract_runtime"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny UDA run's config, training data and model (ResNet18 with a BNNeck, 32x16 crops)."""
    from reid.config import load_config
    from reid.data import build_train_data
    from reid.modeling import build_model

    root = tmp_path_factory.mktemp("data")
    cfg = load_config(DEMO, tiny_opts(root, root / "run") + UDA + ["MODEL.HEADS.NUM_CLASSES", "0"])
    data = build_train_data(cfg, labels_required=False)
    torch.manual_seed(0)
    model = build_model(cfg)
    with torch.no_grad():  # a trained neck: the features after it are not a rescaled copy of those before
        model.neck.running_mean.uniform_(-1, 1)
        model.neck.weight.uniform_(0.5, 2)
    return cfg, data, model


def _with_runtime(cfg, runtime):
    cfg = cfg.clone()
    cfg.defrost()
    cfg.UDA.EXTRACT_RUNTIME = runtime
    cfg.freeze()
    return cfg


def _loader(cfg, data):
    from reid.data import build_test_loader

    return build_test_loader(cfg, [(p, -1, c) for p, _, c in data.items], [])


@pytest.mark.slow
def test_onnxruntime_features_equal_pytorch_and_leave_the_model_as_it_was(run, caplog):
    for package in ("onnxruntime", "onnx", "onnxscript"):  # the export extra (not in the minimum lane)
        pytest.importorskip(package)
    from reid.uda import build_uda_training

    cfg, data, model = run
    feats = {}
    for runtime in ("torch", "onnxruntime"):
        _, hooks = build_uda_training(_with_runtime(cfg, runtime), data, model, cluster_runtimes())
        model.train()
        with caplog.at_level(logging.INFO, logger=LOGGER):
            feats[runtime] = hooks[0].extract(model)
            again = hooks[0].extract(model)
        # the training goes on as it was: train mode, the configured test feature, the same weights' features
        assert model.training and model.neck_feat == "before"
        assert torch.equal(again, feats[runtime])  # the same labels for a resumed run
    n = len(data.items)
    assert 30 <= n <= 60 and feats["onnxruntime"].shape == feats["torch"].shape == (n, model.feature_dim)
    cosine = (feats["onnxruntime"] * feats["torch"]).sum(1)
    assert float(cosine.min()) >= 0.9999
    assert (feats["onnxruntime"] - feats["torch"]).abs().max() < 1e-4
    # the features after the neck (what the memory's loss sees), not the configured test feature
    model.eval()
    with torch.no_grad():
        x = next(iter(_loader(cfg, data)))["images"]
        before = torch.nn.functional.normalize(model(x), dim=1)
    model.train()
    assert (before - feats["onnxruntime"][: len(x)]).abs().max() > 0.1
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert lines == ["Clustering extracts features with PyTorch (UDA.EXTRACT_RUNTIME torch).",
                     "Clustering extracts features with ONNX Runtime (UDA.EXTRACT_RUNTIME onnxruntime)."]


@pytest.mark.slow
def test_auto_names_onnx_runtime_and_why_in_one_line(run, caplog):
    for package in ("onnxruntime", "onnx", "onnxscript"):  # the export extra (not in the minimum lane)
        pytest.importorskip(package)
    cfg, data, model = run
    extractor = ClusterExtractor("auto", input_size=cfg.INPUT.SIZE_TEST, num_images=AUTO_MIN_IMAGES,
                                 runtimes=cluster_runtimes())
    loader = _loader(cfg, data)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        feats = extractor(model, loader, torch.device("cpu"))
        extractor(model, loader, torch.device("cpu"))
    (line,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert line.startswith("Clustering extracts features with ONNX Runtime (UDA.EXTRACT_RUNTIME auto: ")
    assert extractor.runtime == "onnxruntime" and feats.shape == (len(data.items), model.feature_dim)


def test_auto_falls_back_to_pytorch_without_onnxruntime_in_one_line(run, caplog, monkeypatch):
    from reid.evaluation.extract import extract_features

    cfg, data, model = run
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime -> ImportError
    extractor = ClusterExtractor("auto", input_size=cfg.INPUT.SIZE_TEST, num_images=AUTO_MIN_IMAGES,
                                 runtimes=cluster_runtimes())
    loader = _loader(cfg, data)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        feats = extractor(model, loader, torch.device("cpu"))
        extractor(model, loader, torch.device("cpu"))
    (line,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert line.startswith("Clustering extracts features with PyTorch (UDA.EXTRACT_RUNTIME auto: ")
    assert "onnxruntime" in line and "not installed (pip install" in line
    torch.testing.assert_close(feats, extract_features(model, loader, torch.device("cpu")).feats)
    # asked for by name, it is refused when the run is built, saying what to install
    with pytest.raises(ImportError, match=r"UDA.EXTRACT_RUNTIME onnxruntime .*onnxruntime[a-z, ]* not installed \(pip "):
        ClusterExtractor("onnxruntime", runtimes=cluster_runtimes())


def test_a_model_that_cannot_export_falls_back_to_pytorch_in_one_line(run, caplog, monkeypatch):
    from reid.evaluation.extract import extract_features

    cfg, data, model = run
    calls = []

    def cannot(model, size):
        calls.append(size)
        raise RuntimeError("aten.some_op has no ONNX translation\nmore detail")

    cannot_export = {"onnxruntime": ExtractRuntime(cannot)}
    extractor = ClusterExtractor("auto", input_size=cfg.INPUT.SIZE_TEST, num_images=AUTO_MIN_IMAGES,
                                 runtimes=cannot_export)
    loader = _loader(cfg, data)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        feats = extractor(model, loader, torch.device("cpu"))
        extractor(model, loader, torch.device("cpu"))  # PyTorch from then on: no second export
    assert calls == [(32, 16)]
    (record,) = [r for r in caplog.records if r.name == LOGGER]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "Clustering extracts features with PyTorch (UDA.EXTRACT_RUNTIME auto: the model could not be exported to "
        "ONNX Runtime (RuntimeError: aten.some_op has no ONNX translation), so PyTorch for the rest of the run).")
    torch.testing.assert_close(feats, extract_features(model, loader, torch.device("cpu")).feats)
    # asked for by name, the failure stops the run and says what to set
    with pytest.raises(RuntimeError, match="UDA.EXTRACT_RUNTIME onnxruntime: the model could not be exported .* set "
                                           "UDA.EXTRACT_RUNTIME torch"):
        ClusterExtractor("onnxruntime", input_size=cfg.INPUT.SIZE_TEST, runtimes=cannot_export)(model, loader,
                                                                                              torch.device("cpu"))


def test_auto_keeps_pytorch_where_onnx_runtime_would_not_pay_or_not_match():
    # a runtime needing no package: the choice, not this environment's extras, is under test
    runtimes = {"onnxruntime": ExtractRuntime(cluster_runtimes()["onnxruntime"].build)}
    cpu, big = torch.device("cpu"), AUTO_MIN_IMAGES
    assert choose_runtime("auto", cpu, num_images=big, runtimes=runtimes)[0] == "onnxruntime"
    assert choose_runtime("AUTO", cpu, runtimes=runtimes)[0] == "onnxruntime"  # size unknown: the one that pays at scale
    for kwargs, why in [(dict(device=torch.device("cuda", 0)), "the model is on cuda"),
                        (dict(amp="bf16"), "TEST.AMP bf16"), (dict(flip=True), "TEST.FLIP averages unnormalised"),
                        (dict(num_images=big - 1), f"{big - 1} crops are too few")]:
        args = {"device": cpu, "num_images": big, "runtimes": runtimes, **kwargs}
        name, reason = choose_runtime("auto", args.pop("device"), **args)
        assert name == "torch" and reason.startswith("UDA.EXTRACT_RUNTIME auto: ") and why in reason
    assert choose_runtime("torch", cpu, num_images=big) == ("torch", "UDA.EXTRACT_RUNTIME torch")
    assert choose_runtime("onnxruntime", cpu, num_images=10, runtimes=runtimes)[0] == "onnxruntime"  # by name: always
    with pytest.raises(ValueError, match="UDA.EXTRACT_RUNTIME 'tensorrt' is not one of: auto, torch, onnxruntime"):
        ClusterExtractor("tensorrt")
    with pytest.raises(ValueError, match="UDA.EXTRACT_RUNTIME onnxruntime runs the exported model.*TEST.FLIP False"):
        ClusterExtractor("onnxruntime", flip=True)


def test_a_run_built_without_the_runtime_keeps_pytorch_and_says_so():
    name, reason = choose_runtime("auto", torch.device("cpu"), num_images=AUTO_MIN_IMAGES)
    assert name == "torch" and "built without the onnxruntime runtime" in reason
    with pytest.raises(ImportError, match="built without the onnxruntime runtime"):
        ClusterExtractor("onnxruntime")
