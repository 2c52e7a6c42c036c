"""Distributed helpers in a single process, and a real 2-process gloo run under torchrun."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist
from torch import nn

from reid.engine.distributed import (
    DistInfo,
    barrier,
    convert_sync_bn,
    get_rank,
    get_world_size,
    init_distributed,
    is_main_process,
    wrap_ddp,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_single_process_helpers_are_no_ops(monkeypatch):
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert init_distributed("cpu") == DistInfo(0, 1, 0, None)
    assert (get_rank(), get_world_size(), is_main_process()) == (0, 1, True)
    barrier()
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    assert wrap_ddp(model, torch.device("cpu")) is model
    assert convert_sync_bn(model, torch.device("cpu")) is model


def test_torchrun_environment_without_rendezvous_is_explained(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(RuntimeError, match=r"MASTER_ADDR.*torchrun --nproc_per_node"):
        init_distributed("cpu")
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE='two' must be an integer"):
        init_distributed("cpu")


def test_a_join_timeout_that_is_not_a_positive_number_is_refused(monkeypatch):
    from reid.engine.distributed import join_timeout

    monkeypatch.delenv("REID_DIST_JOIN_TIMEOUT", raising=False)
    assert join_timeout() == 300.0
    for bad in ("soon", "0", "-5", "nan", "inf", "1e300"):
        monkeypatch.setenv("REID_DIST_JOIN_TIMEOUT", bad)
        with pytest.raises(ValueError, match=f"REID_DIST_JOIN_TIMEOUT='{bad}' must be a number of seconds > 0 "
                                             "and at most 604800"):
            join_timeout()


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed gloo unavailable")
@pytest.mark.parametrize("rank", [0, 1], ids=["rank 0 alone", "rank 0 unreachable"])
def test_a_group_that_cannot_form_ends_in_one_line_after_the_join_timeout(rank):
    from tests.engine.cluster_runs import free_port

    port = free_port()  # rank 0 hosts there and nobody joins, or (rank 1) nobody listens there
    env = dict(os.environ, PYTHONPATH=ROOT, WORLD_SIZE="2", RANK=str(rank), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), REID_DIST_JOIN_TIMEOUT="2")
    # (a hang would end in subprocess.TimeoutExpired)
    proc = subprocess.run([sys.executable, "-c", "from reid.engine import init_distributed; init_distributed('cpu')"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: process {rank} of 2 waited 2 s for the others to join at 127.0.0.1:{port} "
                      "(MASTER_ADDR:MASTER_PORT): check that every process of the job started (WORLD_SIZE), that "
                      "this address reaches rank 0's machine and its port is open; REID_DIST_JOIN_TIMEOUT=SECONDS "
                      "waits longer."]


WORKER = textwrap.dedent(
    """
    import json, os, sys
    import torch
    from reid.config import get_cfg
    from reid.data import build_train_data, build_train_loader
    from reid.engine import Trainer, init_distributed, cleanup_distributed
    from reid.modeling import build_model
    from reid.utils.logger import setup_logger
    from reid.utils.process import seed_everything

    root, out, side, backbone = sys.argv[1:5]
    cfg = get_cfg()
    cfg.DATASETS.ROOT = root
    cfg.DATASETS.NAMES = ["synthetic"]
    s = cfg.DATASETS.SYNTHETIC
    s.NUM_TRAIN_IDS, s.NUM_TEST_IDS, s.NUM_CAMERAS, s.IMAGES_PER_CAMERA, s.NUM_DISTRACTORS = 8, 3, 2, 2, 0
    s.IMAGE_SIZE = [64, 32]
    cfg.INPUT.SIZE_TRAIN = [64, 32]
    cfg.MODEL.BACKBONE.NAME = backbone
    cfg.MODEL.BACKBONE.PRETRAINED = False
    cfg.MODEL.DEVICE = "cpu"
    cfg.MODEL.HEADS.NAME = "curricularface"  # its buffer t must stay equal on both ranks
    cfg.MODEL.SYNC_BN = True  # must degrade to per-process BN on the CPU, with a warning
    cfg.SOLVER.IMS_PER_BATCH = 16  # 8 per process
    cfg.DATALOADER.NUM_INSTANCE = 2
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.SOLVER.MAX_EPOCH = 1
    cfg.SOLVER.WARMUP_ITERS = 1
    cfg.SOLVER.FREEZE_ITERS = 1  # exercises DDP with parameters that get no gradient
    cfg.SOLVER.LOG_PERIOD = 1
    cfg.OUTPUT_DIR = out
    info = init_distributed("cpu")
    setup_logger(out, rank=info.rank)
    seed_everything(cfg.SEED, info.rank)
    data = build_train_data(cfg)
    cfg.MODEL.HEADS.NUM_CLASSES = data.num_classes
    torch.manual_seed(0)
    model = build_model(cfg)
    seen, local = [], []
    model.register_forward_pre_hook(lambda m, args: seen.append(args[1].tolist()))
    model.register_forward_hook(lambda m, args, outp: local.append(float(outp["loss_id"])))
    loader = build_train_loader(cfg, data.items)
    trainer = Trainer(cfg, model, loader, progress=False)
    trainer.train()
    torch.save(trainer.model.state_dict(), os.path.join(side, f"model_rank{info.rank}.pth"))
    loader.sampler.set_epoch(0)
    sample_seeds = [seed for _, seed in loader.sampler]
    with open(os.path.join(side, f"rank{info.rank}.json"), "w") as f:
        json.dump({"world": info.world_size, "backend": info.backend, "targets": seen, "loss_id": local,
                   "t": float(trainer.model.head.t), "sample_seeds": sample_seeds}, f)
    cleanup_distributed()
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed gloo unavailable")
@pytest.mark.parametrize("backbone", ["resnet18", "osnet_ain_x0_25"])
def test_two_process_gloo_run_splits_identities_and_only_rank0_writes(backbone, tmp_path):
    from reid.data import build_dataset

    root, out, side = tmp_path / "data", tmp_path / "out", tmp_path / "side"
    side.mkdir()
    # Draw the dataset once here, so the two ranks do not race to generate it.
    build_dataset("synthetic", str(root), num_train_ids=8, num_test_ids=3, num_cameras=2,
                  images_per_camera=2, num_distractors=0, image_size=(64, 32))
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(script), str(root), str(out), str(side), backbone]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    ranks = [json.loads((side / f"rank{r}.json").read_text()) for r in range(2)]
    assert all(r["world"] == 2 and r["backend"] == "gloo" for r in ranks)
    ids = [{t for batch in r["targets"] for t in batch} for r in ranks]
    assert ids[0] and ids[1] and not ids[0] & ids[1], f"ranks shared identities: {ids}"
    assert len(ranks[0]["targets"]) == len(ranks[1]["targets"])  # same number of iterations

    # Each rank draws its own augmentations (the per-sample seeds mix in the rank).
    assert not set(ranks[0]["sample_seeds"]) & set(ranks[1]["sample_seeds"])
    # CurricularFace's t follows the mean over both ranks' batches, so the ranks agree on it
    # (it is also compared with the rest of the state below).
    assert ranks[0]["t"] == ranks[1]["t"] != 0.0

    # DDP kept the replicas identical; rank 0's checkpoint holds them.
    final = torch.load(str(out / "model_final.pth"), weights_only=True)["model"]
    for r in range(2):
        replica = torch.load(str(side / f"model_rank{r}.pth"), weights_only=True)
        for k, v in final.items():
            if k.endswith(("running_mean", "running_var", "num_batches_tracked")):
                continue  # BN statistics are per process without SyncBN (CPU)
            assert torch.equal(v, replica[k]), f"rank {r} differs in {k}"

    # Only rank 0 wrote: one train record per iteration (not two), losses averaged over ranks.
    records = [json.loads(line) for line in open(out / "metrics.jsonl")]
    train = [r for r in records if r["type"] == "train"]
    iters = len(ranks[0]["targets"])
    assert [r["iter"] for r in train] == list(range(1, iters + 1))
    for i, rec in enumerate(train):
        expected = (ranks[0]["loss_id"][i] + ranks[1]["loss_id"][i]) / 2
        assert rec["loss_id"] == pytest.approx(expected, rel=1e-4)
        assert rec["images_per_s"] > 0
    log = open(out / "log.txt").read()
    assert log.count("Saved checkpoint") == 1 and "processes: 2" in log
    assert "SyncBatchNorm needs CUDA" in proc.stdout + proc.stderr
    expected = ["config.yaml", "last_checkpoint", "log.txt", "metrics.jsonl", "model_final.pth"]
    if importlib.util.find_spec("tensorboard") is not None:  # event files only with the optional package
        expected.append("tensorboard")
        assert len(os.listdir(out / "tensorboard")) == 1  # rank 0's event file only
    assert sorted(os.listdir(out)) == sorted(expected)


def _two_ranks(tmp_path, worker: str, launcher=("-m", "torch.distributed.run")):
    """Run `worker` (a script: argv out, side) as two gloo processes; (the process, out, side)."""
    out, side = tmp_path / "out", tmp_path / "side"
    side.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(worker)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    cmd = [sys.executable, *launcher, "--standalone", "--nproc_per_node", "2", str(script), str(out), str(side)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env), out, side


FAILING_WORKER = textwrap.dedent(
    """
    import json, os, sys, time
    import torch
    from reid.engine import Trainer, init_distributed, cleanup_distributed
    from reid.utils.logger import setup_logger
    from tests.engine.stubs import StubReID, stub_cfg, stub_loader

    out, side = sys.argv[1:3]
    info = init_distributed("cpu")
    cfg = stub_cfg(out, **{"SOLVER.IMS_PER_BATCH": 8, "SOLVER.MAX_EPOCH": 3, "TEST.EVAL_PERIOD": 1})
    setup_logger(out, rank=info.rank)

    def eval_fn(model, epoch):  # runs on rank 0 only
        if epoch == 2:
            with open(os.path.join(side, "failed_at"), "w") as f:
                f.write(repr(time.time()))
            raise ValueError("the test set has no query with a match")
        return [{"split": "test", "dataset": "stub", "mAP": 1.0}]

    trainer = Trainer(cfg, StubReID(), stub_loader(cfg, rank=info.rank, world_size=info.world_size),
                      eval_fn=eval_fn, progress=False)
    try:
        trainer.train()
    except Exception as e:
        with open(os.path.join(side, f"end{info.rank}.json"), "w") as f:
            json.dump({"time": time.time(), "error": type(e).__name__, "message": str(e)}, f)
        cleanup_distributed()
        sys.exit(1)
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed gloo unavailable")
def test_a_failing_evaluation_on_rank0_stops_every_process_promptly(tmp_path):
    proc, out, side = _two_ranks(tmp_path, FAILING_WORKER)
    assert proc.returncode != 0
    failed_at = float((side / "failed_at").read_text())
    ends = [json.loads((side / f"end{r}.json").read_text()) for r in range(2)]  # both ended by themselves
    assert ends[0]["error"] == "ValueError" and "no query with a match" in ends[0]["message"]
    assert ends[1]["error"] == "PeerFailedError" and "evaluation" in ends[1]["message"]
    assert all(e["time"] - failed_at < 30 for e in ends)
    log = (out / "log.txt").read_text()
    assert "Evaluation after epoch 2 failed: ValueError: the test set has no query with a match" in log
    assert "The weights of epoch 2 were saved to" in log and (out / "model_0002.pth").is_file()


STOPPED_EVAL_WORKER = textwrap.dedent(
    """
    import json, os, signal, sys
    from reid.engine import Trainer, TrainingInterrupted, init_distributed, cleanup_distributed
    from reid.utils.logger import setup_logger
    from reid.utils.stop_request import check_stop
    from tests.engine.stubs import StubReID, stub_cfg, stub_loader

    out, side = sys.argv[1:3]
    info = init_distributed("cpu")
    cfg = stub_cfg(out, **{"SOLVER.IMS_PER_BATCH": 8, "SOLVER.MAX_EPOCH": 3, "TEST.EVAL_PERIOD": 1})
    setup_logger(out, rank=info.rank)

    def eval_fn(model, epoch):  # runs on rank 0 only; a SIGTERM reaches it mid-extraction
        if epoch == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            check_stop("feature extraction")
        return [{"split": "test", "dataset": "stub", "mAP": 1.0}]

    trainer = Trainer(cfg, StubReID(), stub_loader(cfg, rank=info.rank, world_size=info.world_size),
                      eval_fn=eval_fn, progress=False)
    try:
        trainer.train()
        end = {"error": None}
    except TrainingInterrupted as e:
        end = {"error": "TrainingInterrupted", "code": e.exit_code, "iteration": e.iteration}
    except Exception as e:
        end = {"error": type(e).__name__, "message": str(e)}
    with open(os.path.join(side, f"end{info.rank}.json"), "w") as f:
        json.dump(end, f)
    cleanup_distributed()
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed gloo unavailable")
def test_an_evaluation_abandoned_for_a_stop_on_rank0_stops_every_rank_alike(tmp_path):
    proc, out, side = _two_ranks(tmp_path, STOPPED_EVAL_WORKER)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ends = [json.loads((side / f"end{r}.json").read_text()) for r in range(2)]
    ipe = 6  # 48 stub images, a global batch of 8
    # Rank 1 never got the signal: the agreement after rank 0's evaluation stopped it too.
    assert ends == [{"error": "TrainingInterrupted", "code": 143, "iteration": 2 * ipe}] * 2
    ckpt = torch.load(out / "model_interrupted.pth", weights_only=True)
    assert ckpt["iteration"] == 2 * ipe and ckpt["sampler"] == {"epoch": 1, "start_batch": ipe}
    assert not (out / "model_0002.pth").exists() and (out / "model_0001.pth").exists()


ONE_RANK_SIGNALLED_WORKER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from reid.engine import Trainer, TrainingInterrupted, init_distributed, cleanup_distributed
    from reid.utils.logger import setup_logger
    from tests.engine.stubs import StubReID, stub_cfg, stub_loader

    out, side = sys.argv[1:3]
    info = init_distributed("cpu")
    cfg = stub_cfg(out, **{"SOLVER.IMS_PER_BATCH": 8, "SOLVER.MAX_EPOCH": 3, "TEST.EVAL_PERIOD": 0})
    setup_logger(out, rank=info.rank)

    def on_forward(call):  # only rank 1 is signalled (a node-local preemption), in its 9th step
        if info.rank == 1 and call == 8:
            os.kill(os.getpid(), signal.SIGTERM)

    trainer = Trainer(cfg, StubReID(on_forward=on_forward), stub_loader(cfg, rank=info.rank, world_size=2),
                      progress=False)
    save = trainer.checkpointer.save

    def slow_save(name):  # a checkpoint that takes a while to write (a large model, network storage)
        time.sleep(3)
        path = save(name)
        with open(os.path.join(side, "saved"), "w") as f:
            f.write(repr(time.time()))
        return path

    trainer.checkpointer.save = slow_save
    try:
        trainer.train()
        end = {"error": None}
    except TrainingInterrupted as e:
        end = {"error": "TrainingInterrupted", "code": e.exit_code, "iteration": e.iteration}
    end["time"] = time.time()
    with open(os.path.join(side, f"end{info.rank}.json"), "w") as f:
        json.dump(end, f)
    cleanup_distributed()
    sys.exit(end.get("code", 0))
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed gloo unavailable")
def test_a_signal_to_one_rank_stops_all_with_its_exit_code_and_none_ends_before_the_save(tmp_path):
    proc, out, side = _two_ranks(tmp_path, ONE_RANK_SIGNALLED_WORKER, [os.path.join(ROOT, "tools", "launch.py")])
    assert proc.returncode == 143, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Rank 0 was never signalled: it stopped at the same step, with the signalled rank's exit code,
    # and wrote the checkpoint before either rank ended (the launcher ends the others once one has
    # ended, so rank 1 may not get to write its record).
    ends = [json.loads((side / f"end{r}.json").read_text()) for r in range(2) if (side / f"end{r}.json").exists()]
    assert (ends[0]["error"], ends[0]["code"], ends[0]["iteration"]) == ("TrainingInterrupted", 143, 9)
    saved = float((side / "saved").read_text())
    assert all(e["time"] >= saved and e["code"] == 143 and e["iteration"] == 9 for e in ends)
    assert torch.load(out / "model_interrupted.pth", weights_only=True)["iteration"] == 9
