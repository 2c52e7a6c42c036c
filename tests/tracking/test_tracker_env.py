"""The tracker environment's folder: made only where nothing of the user's is, never cleared otherwise."""
from __future__ import annotations

import os

import pytest

from reid.tracking import tracker_env
from reid.tracking.tracker_env import TrackerEnvError, tracker_python


def test_a_folder_of_the_users_is_never_cleared(tmp_path, monkeypatch):
    mine = tmp_path / "projects"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    (tmp_path / "projects.lock").write_text("a file of that name, kept")
    ran = []
    monkeypatch.setattr(tracker_env, "_run_steps", lambda steps, env_dir: ran.append(steps))
    monkeypatch.setenv("REID_TRACKER_ENV", str(mine))
    with pytest.raises(TrackerEnvError, match=r"projects .* holds something that is not a tracker environment of "
                                              r"circle-reid, and it is never cleared"):
        tracker_python()
    assert ran == [] and os.listdir(mine) == ["thesis.tex"] and (mine / "thesis.tex").read_text() == "years of work"
    assert (tmp_path / "projects.lock").read_text() == "a file of that name, kept"
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(TrackerEnvError, match="never cleared"):
        tracker_python(env_dir=str(tmp_path / "a_file"))


def test_a_ready_environment_without_its_python_is_one_line_not_remade(tmp_path, monkeypatch):
    env = tmp_path / "env"
    env.mkdir()
    (env / ".circle-reid-ready").write_text("boxmot\n")
    monkeypatch.setattr(tracker_env, "_run_steps", lambda *a: pytest.fail("nothing may be downloaded"))
    with pytest.raises(TrackerEnvError, match=r"marked ready but has no Python .* delete that folder"):
        tracker_python(env_dir=str(env))


def test_a_cut_short_making_is_made_again_with_a_line(tmp_path, monkeypatch):
    """Only a folder marked as a making of ours is cleared (the marker kept while it is made again)."""
    env = tmp_path / "env"
    env.mkdir()
    (env / ".circle-reid-making").write_text("boxmot\n")
    (env / "bin").mkdir()
    (env / "half.txt").write_text("left by a killed making")
    seen = []

    def stop(steps, env_dir):
        seen.append((steps[0][:3], sorted(os.listdir(env_dir))))
        raise TrackerEnvError("stopped here by the test")

    monkeypatch.setattr(tracker_env, "_run_steps", stop)
    lines = []
    with pytest.raises(TrackerEnvError, match="stopped here"):
        tracker_env.create_env(str(env), log=lines.append)
    assert seen == [([tracker_env.sys.executable, "-m", "venv"], [".circle-reid-making"])]
    assert "left half-made" in lines[0]
