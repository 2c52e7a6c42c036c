"""Fixtures of the engine tests that run real jobs (tests/engine/cluster_runs.py)."""
import pytest

from tests.engine import cluster_runs as cr


@pytest.fixture(scope="session")
def cluster_data(tmp_path_factory):
    """The synthetic dataset of the cluster runs, drawn once (ranks and runs never race for it)."""
    from reid.data import build_dataset

    root = tmp_path_factory.mktemp("cluster_data")
    build_dataset("synthetic", str(root), num_train_ids=8, num_test_ids=4, num_cameras=2, images_per_camera=2,
                  num_distractors=0, image_size=(64, 32))
    return str(root)


@pytest.fixture(scope="session")
def straight_runs(tmp_path_factory, cluster_data):
    """``straight_runs(nproc)``: the output folder of an uninterrupted run with `nproc` processes
    on one node (made on first use, then shared by every test that compares with it)."""
    done = {}

    def get(nproc: int) -> str:
        if nproc not in done:
            folder = tmp_path_factory.mktemp(f"straight{nproc}")
            script, out = cr.write_script(folder), folder / "out"
            launcher = [__import__("sys").executable] if nproc == 1 else cr.torchrun(nproc)
            code = cr.run(launcher + [script] + cr.RUN + ["DATASETS.ROOT", cluster_data, "OUTPUT_DIR", str(out)],
                          cr.env(), folder / "log.txt")
            assert code == 0, (folder / "log.txt").read_text()[-3000:]
            done[nproc] = str(out)
        return done[nproc]

    return get
