"""Every program in tools/ parses its arguments before it loads torch: --help and argument
errors answer at once (their speed is measured by benchmarks/bench_cli_startup.py), and the
model tools share one way of naming a model."""
import json
import os
import subprocess
import sys

import pytest

from reid.cli import export as cli_export
from reid.cli import extract as cli_extract
from reid.cli import search as cli_search
from reid.cli.errors import error_text, run_main
from tests._tools import load_tool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "tools")) if name.endswith(".py"))

# Runs each tool's main() with --help and with an unknown flag in one fresh interpreter, then
# reports the heavy libraries that got imported.
_PROBE = """
import contextlib, io, json, runpy, sys
result = {}
for tool in sys.argv[1:]:
    for args in (["--help"], ["--no-such-flag"]):
        sys.argv = [f"tools/{tool}.py"] + args
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as e:
            result[f"{tool} {args[0]}"] = [e.code, out.getvalue(), err.getvalue()]
result["imported"] = [m for m in ("torch", "numpy", "cv2", "scipy", "matplotlib") if m in sys.modules]
print(json.dumps(result))
"""


@pytest.mark.slow
def test_help_and_argument_errors_of_every_tool_load_no_torch():
    assert {"train", "test", "extract", "search", "export", "convert_weights", "visualize", "plot"} <= set(TOOLS)
    proc = subprocess.run([sys.executable, "-c", _PROBE, *TOOLS], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result.pop("imported") == []
    for tool in TOOLS:
        code, out, _ = result[f"{tool} --help"]
        assert code == 0 and "usage:" in out, tool
        code, _, err = result[f"{tool} --no-such-flag"]  # argparse's usage error (exit code 2)
        assert code == 2 and f"{tool}.py: error:" in err, (tool, err)


def test_the_names_the_tools_list_before_torch_loads_are_the_registered_ones():
    """--help lists names from light options modules; the builders registered are exactly those."""
    from reid.export.options import PRECISIONS
    from reid.inference.backends import BACKEND_REGISTRY
    from reid.inference.options import BACKEND_NAMES
    from reid.search.indexes import INDEX_REGISTRY
    from reid.search.options import INDEX_BACKENDS
    from reid.tracking.options import TRACKER_NAMES
    from reid.tracking.tracker_runs import TRACKERS

    assert INDEX_REGISTRY.names() == sorted(INDEX_BACKENDS)
    assert ("torch",) + tuple(BACKEND_REGISTRY.names()) == BACKEND_NAMES
    assert tuple(TRACKERS) == TRACKER_NAMES
    choices = {a.dest: a.choices for a in cli_extract.build_parser()._actions}
    assert tuple(choices["backend"]) == BACKEND_NAMES and tuple(choices["precision"]) == PRECISIONS
    assert tuple({a.dest: a.choices for a in cli_search.build_parser()._actions}["backend"]) == INDEX_BACKENDS


def test_model_tools_refuse_what_cannot_name_one_model(capsys):
    cases = [
        (cli_extract, ["--run", "r", "--config-file", "c.yml", "--input", "x", "--output", "g.npz"],
         "--run and --config-file both name a config"),
        (cli_export, ["--weights", "w.pth", "--output", "m.pt2", "--opset", "18", "TEST.FLIP"], "KEY VALUE pairs"),
        # Overrides typed after a list option would be read as more inputs: said, not guessed.
        (cli_extract, ["--weights", "w.pth", "--output", "g.npz", "--input", "crops/", "TEST.FLIP", "True"],
         "--input got 'TEST.FLIP', which looks like a config override"),
        (cli_search, ["--weights", "w.pth", "--gallery", "g.npz", "--query", "q.jpg", "TEST.FLIP", "True"],
         "--query got 'TEST.FLIP'"),
        (cli_export, ["--weights", "w.pth", "--output", "m.pt2", "MODEL.DEVICE", "cpu"], "--output got 'MODEL.DEVICE'"),
    ]
    for module, argv, message in cases:
        with pytest.raises(SystemExit) as e:
            module.main(argv)
        assert e.value.code == 2 and message in capsys.readouterr().err, argv


@pytest.mark.slow
def test_overrides_and_flags_mix_in_any_order(tmp_path):
    """The model tools parse like train.py and test.py: overrides between or after flags."""
    import cv2
    import numpy as np

    from reid.config import get_cfg
    from reid.engine.checkpoint_files import save_checkpoint
    from reid.inference import load_gallery
    from reid.modeling import build_model

    cfg = get_cfg()
    cfg.MODEL.BACKBONE.NAME, cfg.MODEL.BACKBONE.PRETRAINED, cfg.MODEL.HEADS.NUM_CLASSES = "resnet18", False, 0
    cfg.INPUT.SIZE_TEST, cfg.MODEL.DEVICE = [32, 16], "cpu"
    weights = str(tmp_path / "model.pth")
    save_checkpoint(weights, model=build_model(cfg).state_dict(), cfg=cfg.dump())
    (tmp_path / "crops").mkdir()
    cv2.imwrite(str(tmp_path / "crops" / "a.jpg"), np.full((64, 32, 3), 90, np.uint8))
    out = tmp_path / "g.npz"
    argv = ["--weights", weights, "TEST.FLIP", "True", "--input", str(tmp_path / "crops"), "--output", str(out),
            "--quiet", "INPUT.SIZE_TEST", "[48, 24]", "--num-workers", "0"]
    assert cli_extract.main(argv) == 0
    meta = load_gallery(str(out)).meta
    assert meta["flip"] == "True" and meta["input_size"] == "48x24"


def test_a_message_of_several_lines_prints_its_first_as_the_error_line(capsys):
    def missing():
        raise FileNotFoundError("Could not find X: set DATASETS.ROOT.\nSearched:\n  /a (not found)\nExpected layout:\n  <root>/X/")

    assert run_main(missing) == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: Could not find X: set DATASETS.ROOT.", "  Searched:", "    /a (not found)", "  Expected layout:",
        "    <root>/X/"]
    folded = RuntimeError("Caught ValueError in DataLoader worker process 0.\nOriginal Traceback (most recent call "
                          "last):\n  File \"x.py\", line 1\nValueError: bad image a.jpg")
    assert error_text(folded) == "error: bad image a.jpg"


def _bounded_cases():
    from reid.config import value_range

    side = value_range("INPUT.SIZE_TEST")[1]
    batch = value_range("TEST.IMS_PER_BATCH")[1]
    workers = value_range("DATALOADER.NUM_WORKERS")[1]
    model = ["--weights", "w.pth"]
    extract = ["extract"] + model + ["--input", "x", "--output", "g.npz"]
    search = ["search"] + model + ["--gallery", "g.npz", "--query", "q.jpg"]
    config = "(the bounds of {})"
    return [
        # The case: a size the config refuses was allocated until the machine ran out.
        (["export"] + model + ["--output", "m.onnx", "--input-size", "5000", "5000"],
         f"argument --input-size: 5000 is out of range: it must lie in [16, {side}] "
         + config.format("INPUT.SIZE_TEST")),
        (["export"] + model + ["--output", "m.onnx", "--input-size", "100000", "100000"], "100000 is out of range"),
        (["export"] + model + ["--output", "m.onnx", "--input-size", "8", "8"], "8 is out of range"),
        (["export"] + model + ["--output", "m.onnx", "--opset", "9"], "argument --opset: 9 is out of range: it must lie >= 18"),
        (extract + ["--batch-size", "0"], f"argument --batch-size: 0 is out of range: it must lie in [1, {batch}]"),
        (extract + ["--batch-size", str(10 ** 9)], config.format("TEST.IMS_PER_BATCH")),
        (extract + ["--num-workers", "-1"], f"argument --num-workers: -1 is out of range: it must lie in [0, {workers}]"),
        (extract + ["--num-workers", "100000"], config.format("DATALOADER.NUM_WORKERS")),
        (search + ["-k", "0"], "argument -k/--topk: 0 is out of range: it must lie in [1, 10000]"),
        (search + ["-k", str(10 ** 9)], "argument -k/--topk: 1000000000 is out of range"),
        (search + ["-k", "500", "--draw", "pics"], "--draw puts each query's matches in one row of at most 100 images"),
        (search + ["--tile-height", str(10 ** 6)], f"argument --tile-height: 1000000 is out of range: it must lie in "
                                                  f"[32, {side}]"),
        (search + ["--batch-size", str(10 ** 9)], "argument --batch-size: 1000000000 is out of range"),
        (search + ["--hnsw-m", str(10 ** 6)], "argument --hnsw-m: 1000000 is out of range: it must lie in [2, 256]"),
        (search + ["--ef-search", "0"], "argument --ef-search: 0 is out of range"),
        (search + ["--pq-nbits", "64"], "argument --pq-nbits: 64 is out of range: it must lie in [1, 16]"),
        (search + ["--far", "2"], "--far is a false accept rate in (0, 1)"),
        (["test"] + model + ["--vis-topk", "1000"], "argument --vis-topk: 1000 is out of range: it must lie in [1, 100]"),
        (["test"] + model + ["--open-set", "0"], "argument --open-set: 0 is out of range"),
        (["visualize", "f.npz", "-o", "out", "--tile-height", "100000"], "argument --tile-height: 100000 is out of range"),
        (["visualize", "f.npz", "-o", "out", "--topk", "1000"], "argument --topk: 1000 is out of range"),
        (["visualize", "f.npz", "-o", "out", "--k1", "0"], "argument --k1: 0 is out of range: it must lie >= 1"),
        (["plot", "similarity", "--features", "f.npz", "--bins", str(10 ** 9)],
         "argument --bins: 1000000000 is out of range: it must lie in [1, 10000]"),
        (["plot", "gradients", "--grid", str(10 ** 6)], "argument --grid: 1000000 is out of range: it must lie in [2, 2001]"),
        (["plot", "cmc", "--features", "f.npz", "--max-rank", str(10 ** 9)], "argument --max-rank: 1000000000 is out"),
        (["plot", "cmc", "--features", "f.npz", "--max-rank", "ten"], "argument --max-rank: 'ten' is not an integer"),
    ]


@pytest.mark.parametrize("argv, message", _bounded_cases())
def test_every_size_on_the_command_line_is_bounded_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        load_tool(argv[0]).main(argv[1:])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err, err
    assert len([line for line in err.splitlines() if "error:" in line]) == 1
