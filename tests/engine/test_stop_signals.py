"""Stops as clusters make them: a signal to every process of the job, loader workers included.

SLURM's scancel, preemption and ``--signal``, Kubernetes and ``timeout`` signal the whole job;
the run must end like Ctrl-C (a checkpoint, a line saying how to resume, exit code 128 + signal)
and ``--resume`` must end on exactly the uninterrupted run's weights, in one process and under
torchrun.
"""
import os
import signal
import sys

import pytest
import torch
import torch.distributed as dist

from reid.engine.checkpoint_files import last_checkpoint
from tests.engine import cluster_runs as cr
from tests.engine.stubs import assert_same_weights, model_state

needs_gloo = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed gloo unavailable")
SIGNALS = pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1], ids=["SIGTERM", "SIGUSR1"])


def _stop_and_resume(tmp_path, cluster_data, launcher, ranks, signum, every_process=False):
    """Run until every rank holds after step IPE + 1 (mid epoch 2), signal, then --resume.
    Returns (exit code of the stopped run, its log.txt, the whole console output, the folder)."""
    script, log, out = cr.write_script(tmp_path), tmp_path / "console.txt", tmp_path / "stopped"
    args = [script] + cr.RUN + ["DATASETS.ROOT", cluster_data, "OUTPUT_DIR", str(out)]
    marker = str(tmp_path / "held")
    held = cr.env(STOP_AT=str(cr.IPE + 1), STOP_MARKER=marker)
    code = cr.signal_when_held(launcher + args, held, marker, ranks, signum, log, every_process)
    text = (out / "log.txt").read_text()
    stop_path = last_checkpoint(str(out))
    stop_ckpt = torch.load(stop_path, weights_only=True)
    assert stop_path.endswith("model_interrupted.pth"), text[-3000:]
    assert cr.run(launcher + args + ["--resume"], cr.env(), log) == 0, log.read_text()[-3000:]
    return code, text, log.read_text(), out, stop_ckpt


@pytest.mark.slow
@SIGNALS
def test_a_signal_to_the_whole_process_group_saves_and_resume_is_exact(tmp_path, cluster_data, straight_runs, signum):
    code, text, console, out, ckpt = _stop_and_resume(tmp_path, cluster_data, [sys.executable], 1, signum)
    name = signal.Signals(signum).name
    assert code == 128 + signum, console[-3000:]
    assert "DataLoader worker" not in console and "Traceback" not in console
    assert f"Training stopped by {name} after iteration {cr.IPE + 1} (epoch 2)" in text
    assert "Run the same command with --resume to continue" in text
    assert ckpt["iteration"] == cr.IPE + 1 and ckpt["sampler"] == {"epoch": 1, "start_batch": 1}
    assert_same_weights(model_state(os.path.join(straight_runs(1), "model_final.pth")),
                        model_state(str(out / "model_final.pth")))
    assert cr.train_iterations(out) == list(range(1, 3 * cr.IPE + 1))  # each iteration once


@pytest.mark.slow
@needs_gloo
def test_a_signal_to_every_process_of_a_two_rank_job_stops_every_rank_at_one_step(tmp_path, cluster_data,
                                                                                   straight_runs):
    # As SLURM's --signal does: the launcher, both ranks and each rank's two loader workers get
    # SIGUSR1, which torchrun's agent alone would die of (SIGTERM takes torchrun's own path).
    signum = signal.SIGUSR1
    code, text, console, out, ckpt = _stop_and_resume(tmp_path, cluster_data, cr.launch(2), 2, signum,
                                                      every_process=True)
    name = signal.Signals(signum).name
    assert code == 128 + signum, console[-3000:]
    assert "DataLoader worker" not in console and "Traceback" not in console
    assert f"launch.py: stopped by {name}" in console
    # Both ranks held after step IPE + 1; the stop travelled with the next step's all-reduce: one
    # checkpoint, by rank 0, after the step every rank completed.
    assert text.count("model_interrupted.pth (iteration") == 1
    assert f"Training stopped by {name} after iteration {cr.IPE + 2}" in text
    assert ckpt["iteration"] == cr.IPE + 2
    assert_same_weights(model_state(os.path.join(straight_runs(2), "model_final.pth")),
                        model_state(str(out / "model_final.pth")))
    assert cr.train_iterations(out) == list(range(1, 3 * cr.IPE + 1))
