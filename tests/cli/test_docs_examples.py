"""Commands shown in the docs run as written (with small data and a short schedule)."""
import os
import re
import shlex
import subprocess
import sys

import pytest

from reid.config import load_config
from reid.data import build_dataset

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def doc_command(doc: str, name: str) -> list:
    """The bash command after ``<!-- example: name -->`` in docs/<doc>, as argv."""
    text = open(os.path.join(ROOT, "docs", doc), encoding="utf-8").read()
    match = re.search(rf"<!-- example: {name} -->\s*```bash\n(.*?)```", text, re.S)
    assert match, f"docs/{doc} has no example {name!r}"
    return shlex.split(match.group(1).replace("\\\n", " "))


def write_lists(folder, items):
    """Write ``train/query/gallery.txt`` (relative paths) from a synthetic dataset's splits."""
    for split, rows in items.items():
        with open(folder / f"{split}.txt", "w") as f:
            f.writelines(f"{os.path.relpath(p, folder)} {pid} {cam}\n" for p, pid, cam in rows)


@pytest.mark.slow
def test_the_custom_data_example_runs_offline_into_its_own_folder(tmp_path):
    ds = build_dataset("synthetic", str(tmp_path / "data"), num_train_ids=4, num_test_ids=3, num_cameras=2,
                       images_per_camera=2, num_distractors=0, image_size=(64, 32))
    mine = tmp_path / "mine"
    mine.mkdir()
    write_lists(mine, {"train": ds.train, "query": ds.query, "gallery": ds.gallery})
    argv = doc_command("getting_started.md", "custom-data")
    assert argv[:2] == ["python", "tools/train.py"]
    argv = [a.replace("/data/mine", str(mine)) for a in argv]
    config = os.path.join(ROOT, argv[argv.index("--config-file") + 1])
    argv[argv.index("--config-file") + 1] = config
    # Only the size of the run changes; no network is reachable in CI, so a download would fail.
    small = ["INPUT.SIZE_TRAIN", "[32, 16]", "INPUT.SIZE_TEST", "[32, 16]", "INPUT.PADDING", "2",
             "SOLVER.IMS_PER_BATCH", "8", "DATALOADER.NUM_INSTANCE", "2", "DATALOADER.NUM_WORKERS", "0",
             "SOLVER.MAX_EPOCH", "1", "SOLVER.WARMUP_ITERS", "1", "MODEL.DEVICE", "cpu"]
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "train.py")] + argv[2:] + small,
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "output" / "custom" / "resnet18_circle" / "model_final.pth").is_file()
    # The accurate variant has its own folder too, never a Market-1501 run's.
    accurate = load_config(os.path.join(ROOT, "configs", "Custom", "resnet50_circle.yml"))
    market = load_config(os.path.join(ROOT, "configs", "Market1501", "resnet50_circle.yml"))
    assert accurate.OUTPUT_DIR == "output/custom/resnet50_circle" != market.OUTPUT_DIR
    assert list(accurate.DATASETS.NAMES) == ["custom"] and accurate.MODEL.BACKBONE.PRETRAINED
