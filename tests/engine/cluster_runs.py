"""Real training runs as a cluster makes them: torchrun on one or two nodes (agents on loopback),
stopped by signals to every process, restarted elastically. Shared by the stop and multi-node
tests; each run is tools/train.py on a small synthetic dataset with persistent loader workers."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from typing import Dict, List, Sequence

from tests._tools import ROOT

DEMO = os.path.join(ROOT, "configs", "Demo", "resnet18_circle.yml")
IPE = 4  # iterations per epoch (one process; two ranks split each global batch: as many steps)

# 8 identities x 2 cameras x 2 images, global batches of 8 (P 2 x K 4), 2 loader workers per
# process that persist between epochs, 3 epochs, a checkpoint per epoch, one evaluation at the end.
RUN = ["--config-file", DEMO, "DATASETS.SYNTHETIC.NUM_TRAIN_IDS", "8", "DATASETS.SYNTHETIC.NUM_TEST_IDS", "4",
       "DATASETS.SYNTHETIC.NUM_CAMERAS", "2", "DATASETS.SYNTHETIC.IMAGES_PER_CAMERA", "2",
       "DATASETS.SYNTHETIC.NUM_DISTRACTORS", "0", "DATASETS.SYNTHETIC.IMAGE_SIZE", "[64, 32]",
       "INPUT.SIZE_TRAIN", "[64, 32]", "INPUT.SIZE_TEST", "[64, 32]", "MODEL.DEVICE", "cpu",
       "DATALOADER.NUM_WORKERS", "2", "SOLVER.IMS_PER_BATCH", "8", "DATALOADER.NUM_INSTANCE", "4",
       "SOLVER.MAX_EPOCH", "3", "SOLVER.WARMUP_ITERS", "2", "SOLVER.CHECKPOINT_PERIOD", "1",
       "TEST.EVAL_PERIOD", "0", "TEST.IMS_PER_BATCH", "8", "SOLVER.LOG_PERIOD", "1"]

# tools/train.py plus a hook that, the first time (not after an elastic restart: the marker file
# exists then), holds every rank after step STOP_AT until a stop arrives, so that a signal (or a
# kill) lands mid-epoch at a known step with the loader workers busy. The marker holds the pid.
SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {root!r})
    from reid.cli.train import main
    from reid.engine import HookBase

    class HoldAtStep(HookBase):
        def __init__(self, at, marker):
            self.at, self.marker = at, marker

        def after_step(self):
            t = self.trainer
            if t.iter != self.at or os.path.exists(self.marker + str(t.rank)):
                return
            with open(self.marker + ".tmp" + str(t.rank), "w") as f:  # renamed whole: never read half-written
                f.write(str(os.getpid()))
            os.replace(self.marker + ".tmp" + str(t.rank), self.marker + str(t.rank))
            deadline = time.time() + 120
            while t.stop_reason is None and time.time() < deadline:
                time.sleep(0.01)

    at = int(os.environ.get("STOP_AT", "0"))
    hooks = [HoldAtStep(at, os.environ["STOP_MARKER"])] if at else []
    sys.exit(main(sys.argv[1:], hooks=hooks))
    """
)


def write_script(folder) -> str:
    path = os.path.join(str(folder), "train_held.py")
    with open(path, "w") as f:
        f.write(SCRIPT.format(root=ROOT))
    return path


def env(**extra: str) -> Dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT, "STOP_MARKER": "", "STOP_AT": "0", **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(nproc: int) -> List[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]


def launch(nproc: int) -> List[str]:
    return [sys.executable, os.path.join(ROOT, "tools", "launch.py"), "--standalone", "--nproc-per-node", str(nproc)]


def node_command(port: int, run_id: str, *more: str, launcher: Sequence[str] = ("-m", "torch.distributed.run")) -> List[str]:
    """One of two agents ("nodes") of one process each, meeting at 127.0.0.1:`port`: torchrun, or
    with ``launcher=[tools/launch.py]`` ours."""
    return [sys.executable, *launcher, "--nnodes", "2", "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id, *more]


def run(cmd: Sequence[str], environ: Dict[str, str], log_path) -> int:
    with open(log_path, "a") as log:
        return subprocess.run(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=environ, timeout=600).returncode


def run_nodes(cmds: Sequence[Sequence[str]], environ: Dict[str, str], log_path) -> List[int]:
    """Start the agents of a multi-node job together; their exit codes."""
    with open(log_path, "a") as log:
        procs = [subprocess.Popen(list(c), stdout=log, stderr=subprocess.STDOUT, env=environ) for c in cmds]
        try:
            return [p.wait(timeout=600) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()


def descendants(pid: int) -> List[int]:
    """`pid` and every process below it (from /proc: children of children, any session)."""
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def wait_for_markers(marker: str, ranks: int, procs, log_path, timeout: float = 300) -> List[int]:
    """Wait until every rank holds at STOP_AT; their pids."""
    deadline = time.time() + timeout
    while not all(os.path.exists(marker + str(r)) for r in range(ranks)):
        for p in procs:
            assert p.poll() is None, open(log_path).read()[-3000:]
        assert time.time() < deadline, "the run never reached the step it should be held at"
        time.sleep(0.05)
    return [int(open(marker + str(r)).read()) for r in range(ranks)]


def signal_when_held(cmd, environ, marker: str, ranks: int, signum: int, log_path, every_process=False) -> int:
    """Start `cmd` in its own process group; once every rank holds, signal the group or, with
    `every_process`, each process of the job whatever its group (torchrun starts its ranks in
    sessions of their own; SLURM signals every process of a job step). The exit code."""
    with open(log_path, "a") as log:
        proc = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=environ, start_new_session=True)
        try:
            wait_for_markers(marker, ranks, [proc], log_path)
            if every_process:
                for pid in descendants(proc.pid):
                    os.kill(pid, signum)
            else:
                os.killpg(proc.pid, signum)  # what `timeout` or a terminal's Ctrl-C do
            return proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)


def train_iterations(out) -> List[int]:
    """The iterations of the "train" records in a run's metrics.jsonl, in file order."""
    with open(os.path.join(str(out), "metrics.jsonl")) as f:
        return [r["iter"] for r in map(json.loads, f) if r["type"] == "train"]
