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


def test_the_tools_own_names_match_the_library():
    from reid.inference.export import DEFAULT_OPSET
    from reid.inference.search import BACKENDS
    from reid.inference.runtimes import BACKEND_NAMES
    from reid.inference.trackers import TRACKERS

    assert cli_search.BACKENDS == BACKENDS and cli_export.DEFAULT_OPSET == DEFAULT_OPSET
    assert tuple(cli_export.TRACKERS) == tuple(TRACKERS)
    assert tuple(cli_extract.BACKEND_NAMES) == tuple(BACKEND_NAMES)


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
    from reid.engine.checkpoint import save_checkpoint
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
