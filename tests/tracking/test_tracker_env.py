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


# --- BoxMOT versions: a supported range, not one pin (reid/tracking/boxmot_compat.py) ----------------------------

def _python_with_boxmot(tmp_path, version: str) -> str:
    """A stand-in for a Python whose boxmot is `version`: it prints the version, as check_python's probe does."""
    path = tmp_path / f"python-boxmot-{version}"
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return str(path)


def test_every_version_in_the_supported_range_is_taken_and_one_outside_is_one_line(tmp_path):
    oldest, newest = tracker_env.SUPPORTED
    assert tracker_env.BOXMOT_VERSION == newest and oldest != newest
    for version in (oldest, newest):
        python = _python_with_boxmot(tmp_path, version)
        assert tracker_env.check_python(python) == python
    for version in ("22.0.0", "26.0.0", "10.0.84"):
        with pytest.raises(TrackerEnvError) as err:
            tracker_env.check_python(_python_with_boxmot(tmp_path, version))
        message = str(err.value)
        assert len(message.splitlines()) == 1
        assert f"BoxMOT {version} is not supported" in message and f"BoxMOT {oldest} to {newest}" in message


def test_reid_boxmot_version_picks_the_made_environments_version_and_folder(tmp_path, monkeypatch):
    oldest, newest = tracker_env.SUPPORTED
    monkeypatch.delenv("REID_TRACKER_ENV", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("REID_BOXMOT_VERSION", raising=False)
    assert tracker_env.made_version() == newest
    assert tracker_env.default_env_dir().endswith(f"tracker-env-boxmot-{newest}")
    monkeypatch.setenv("REID_BOXMOT_VERSION", oldest)
    assert tracker_env.made_version() == oldest
    assert tracker_env.default_env_dir().endswith(f"tracker-env-boxmot-{oldest}")
    ran = []
    monkeypatch.setattr(tracker_env, "_run_steps", lambda steps, env_dir: ran.append(steps) or _stop())
    with pytest.raises(TrackerEnvError, match="stopped"):
        tracker_env.create_env(str(tmp_path / "env"), log=lambda _: None)
    assert (tmp_path / "env" / ".circle-reid-making").read_text() == f"boxmot[trackeval]=={oldest}\n"
    monkeypatch.setenv("REID_BOXMOT_VERSION", "26.1")
    with pytest.raises(TrackerEnvError) as err:
        tracker_python()
    assert len(str(err.value).splitlines()) == 1
    assert f"REID_BOXMOT_VERSION=26.1: BoxMOT 26.1 is not supported: this toolkit drives BoxMOT {oldest} to {newest}" \
        in str(err.value)


def _stop():
    raise TrackerEnvError("stopped here by the test")


def test_a_ready_environment_of_another_version_than_asked_for_is_one_line(tmp_path, monkeypatch):
    oldest, newest = tracker_env.SUPPORTED
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("#!/bin/sh\n")
    (env / "bin" / "python").chmod(0o755)
    (env / ".circle-reid-ready").write_text(f"boxmot[trackeval]=={newest}\n")
    monkeypatch.setattr(tracker_env, "_run_steps", lambda *a: pytest.fail("nothing may be downloaded"))
    monkeypatch.delenv("REID_BOXMOT_VERSION", raising=False)
    assert tracker_python(env_dir=str(env)) == str(env / "bin" / "python")  # unasked, any supported one is used
    monkeypatch.setenv("REID_BOXMOT_VERSION", oldest)
    with pytest.raises(TrackerEnvError, match=rf"made with boxmot\[trackeval\]=={newest}, and REID_BOXMOT_VERSION "
                                              rf"asks for boxmot\[trackeval\]=={oldest}"):
        tracker_python(env_dir=str(env))
    with pytest.raises(TrackerEnvError, match="asks for"):
        tracker_env.create_env(str(env), log=lambda _: None)
