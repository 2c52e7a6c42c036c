"""tools/tracks_to_reid.py end to end: sequences in, a folder tools/train.py trains and tests on as it is."""
import json
import os

import pytest

from reid.cli import tracks_to_reid as cli
from reid.cli import train as cli_train
from tests.tracking.sequence_files import write_sequence

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "configs", "Demo", "resnet18_circle.yml")


def _scene(root):
    """Two cameras of one scene; persons 1..8 in both, in frames 1..3."""
    gt = "".join(f"{f},{i},{2 + 11 * (i - 1) + f},5,10,40,1,1,1\n" for f in (1, 2, 3) for i in range(1, 9))
    for cam in (1, 2):
        write_sequence(os.path.join(root, f"hall-c{cam}"), length=3, seed=cam, gt=gt, ext=".jpg",
                       extra={"scene": "hall", "camera": str(cam)})
    return root


@pytest.mark.slow
def test_tool_converts_and_train_py_reads_the_result(tmp_path, capsys):
    seqs, out = _scene(str(tmp_path / "seqs")), str(tmp_path / "reid")
    args = ["--sequences", seqs, "--output", out, "--frame-step", "1", "--min-height", "20", "--seed", "1"]
    assert cli.main(args) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}: train 24 crops of 4 ids, query 8, gallery 16 (4 ids)")
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["queries_with_cross_camera_match"] == 8 and summary["settings"]["frame_step"] == 1
    run = tmp_path / "run"
    rc = cli_train.main([
        "--config-file", DEMO, "DATASETS.NAMES", "[market1501]", "DATASETS.TESTS", "[market1501]",
        "DATASETS.ROOT", out, "OUTPUT_DIR", str(run), "MODEL.DEVICE", "cpu", "INPUT.SIZE_TRAIN", "[32, 16]",
        "INPUT.SIZE_TEST", "[32, 16]", "INPUT.PADDING", "2", "SOLVER.IMS_PER_BATCH", "8", "DATALOADER.NUM_INSTANCE",
        "2", "DATALOADER.NUM_WORKERS", "0", "SOLVER.MAX_EPOCH", "1", "SOLVER.WARMUP_ITERS", "1",
    ])
    assert rc == 0
    records = [json.loads(line) for line in open(run / "metrics.jsonl")]
    evals = [r for r in records if r["type"] == "eval"]
    assert [(r["dataset"], r["split"]) for r in evals] == [("market1501", "test")] and 0 <= evals[0]["mAP"] <= 100
    assert "  query    |      4 |        8 |       2" in open(run / "log.txt").read()  # ids, images, cameras
    # a second conversion into the same folder is refused, one line
    assert cli.main(args) == 1
    assert capsys.readouterr().err.strip().startswith(f"error: Output folder {out} exists and is not empty")


def test_tool_argument_and_input_errors(tmp_path, capsys):
    os.makedirs(tmp_path / "empty")
    assert cli.main(["--sequences", str(tmp_path / "empty"), "--output", str(tmp_path / "o")]) == 1
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'empty'}: no MOTChallenge sequence found")
    with pytest.raises(SystemExit) as e:
        cli.main(["--sequences", "x", "--output", "y", "--min-visibility", "2"])
    assert e.value.code == 2 and "argument --min-visibility: 2 is not a fraction in [0, 1]" in capsys.readouterr().err
