"""Two nodes: two torchrun agents of one process each on this machine, meeting over loopback with
the c10d rendezvous (``torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d``), as two
machines of a cluster would. Training must equal the two-process single-node run, extraction and
evaluation the single process; an elastic restart after a lost worker must end on the
uninterrupted run's weights."""
import glob
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch.distributed as dist

from tests._tools import ROOT
from tests.engine import cluster_runs as cr
from tests.engine.stubs import assert_same_weights, model_state

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                                   reason="torch.distributed gloo unavailable")]
TOOLS = os.path.join(ROOT, "tools")


def _two_nodes(tmp_path, name, program, *more, launcher=("-m", "torch.distributed.run")):
    port = cr.free_port()
    return [cr.node_command(port, f"{name}-{port}", *more, launcher=launcher) + program for _ in range(2)]


def test_two_nodes_train_extract_and_evaluate_as_one_node_does(tmp_path, cluster_data, straight_runs):
    log, out = tmp_path / "console.txt", tmp_path / "two_nodes"
    script = cr.write_script(tmp_path)
    program = [script] + cr.RUN + ["DATASETS.ROOT", cluster_data, "OUTPUT_DIR", str(out)]
    assert cr.run_nodes(_two_nodes(tmp_path, "train", program), cr.env(), log) == [0, 0], log.read_text()[-3000:]
    text = (out / "log.txt").read_text()
    assert "processes: 2" in text
    assert_same_weights(model_state(os.path.join(straight_runs(2), "model_final.pth")),
                        model_state(str(out / "model_final.pth")))
    assert cr.train_iterations(out) == list(range(1, 3 * cr.IPE + 1))

    # Extraction: contiguous shards gathered by rank 0 give the single process's gallery.
    weights = str(out / "model_final.pth")
    images, = glob.glob(os.path.join(cluster_data, "synthetic", "*", "bounding_box_test"))
    extract = [os.path.join(TOOLS, "extract.py"), "--weights", weights, "--input", images, "--device", "cpu",
               "--quiet", "--num-workers", "0", "--batch-size", "4", "--output"]
    assert cr.run([sys.executable] + extract + [str(tmp_path / "one.npz")], cr.env(), log) == 0
    codes = cr.run_nodes(_two_nodes(tmp_path, "extract", extract + [str(tmp_path / "two.npz")]), cr.env(), log)
    assert codes == [0, 0], log.read_text()[-3000:]
    with np.load(tmp_path / "one.npz") as one, np.load(tmp_path / "two.npz") as two:
        assert len(one["paths"]) == 8 and list(one["paths"]) == list(two["paths"])
        np.testing.assert_allclose(one["feats"], two["feats"], atol=1e-6)

    # Evaluation: one table, rank 0's, equal to the single process's.
    test = [os.path.join(TOOLS, "test.py"), "--weights", weights, "--device", "cpu", "DATASETS.ROOT", cluster_data,
            "DATALOADER.NUM_WORKERS", "0", "--output-dir"]
    assert cr.run([sys.executable] + test + [str(tmp_path / "test_one")], cr.env(), log) == 0
    codes = cr.run_nodes(_two_nodes(tmp_path, "test", test + [str(tmp_path / "test_two")]), cr.env(), log)
    assert codes == [0, 0], log.read_text()[-3000:]
    one, two = (json.loads((tmp_path / f"test_{n}" / "metrics.json").read_text())["results"] for n in ("one", "two"))
    assert one.keys() == two.keys() and one
    for dataset in one:
        for key in ("R-1", "R-5", "mAP", "mINP", "num_valid_queries"):
            assert one[dataset]["plain"][key] == pytest.approx(two[dataset]["plain"][key], abs=1e-9), key


def test_an_elastic_restart_after_a_lost_worker_resumes_to_the_uninterrupted_weights(tmp_path, cluster_data,
                                                                                    straight_runs):
    log, out = tmp_path / "console.txt", tmp_path / "elastic"
    script, marker = cr.write_script(tmp_path), str(tmp_path / "held")
    program = [script] + cr.RUN + ["DATASETS.ROOT", cluster_data, "OUTPUT_DIR", str(out), "--resume"]
    held = cr.env(STOP_AT=str(cr.IPE + 1), STOP_MARKER=marker)
    with open(log, "a") as console:
        agents = [subprocess.Popen(cmd, stdout=console, stderr=subprocess.STDOUT, env=held)
                  for cmd in _two_nodes(tmp_path, "elastic", program, "--max-restarts", "1",
                                        launcher=[os.path.join(TOOLS, "launch.py")])]
        try:
            pids = cr.wait_for_markers(marker, 2, agents, log)
            os.kill(pids[1], signal.SIGKILL)  # a lost worker mid-epoch 2 (a node's OOM killer, a crash)
            codes = [a.wait(timeout=600) for a in agents]
        finally:
            for a in agents:
                if a.poll() is None:
                    a.kill()
    text = (out / "log.txt").read_text()
    assert codes == [0, 0], log.read_text()[-4000:]
    # The restarted job continued from the epoch-1 checkpoint: the lost steps were trained again.
    assert "Resumed from" in text and "model_0001.pth" in text.split("Resumed from", 1)[1].splitlines()[0]
    assert_same_weights(model_state(os.path.join(straight_runs(2), "model_final.pth")),
                        model_state(str(out / "model_final.pth")))
    assert cr.train_iterations(out) == list(range(1, 3 * cr.IPE + 1))  # the re-trained ones once
