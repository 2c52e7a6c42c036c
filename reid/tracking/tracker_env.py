"""The separate Python in which BoxMOT's trackers and TrackEval run, and the calls into it.

BoxMOT (the maintained library with BoT-SORT, DeepOCSORT and StrongSORT that take appearance
features) pins OpenCV < 5 and gdown < 6, which conflict with this toolkit's requirements, so
it is not installed beside it. Instead, on first use, a virtual environment is made with
``pip install boxmot[trackeval]==BOXMOT_VERSION`` from the package index, with this
environment's packages underneath (a ``.pth`` file), so torch and numpy are not installed
twice and only BoxMOT, its pinned OpenCV and TrackEval are added (about 15 s and 300 MB).
It lives in ``$REID_TRACKER_ENV`` or ``~/.cache/circle-reid/tracker-env-boxmot-<version>``;
``--tracker-python`` names another Python that has boxmot and trackeval.

The environment runs ``reid/tracking/boxmot_side.py`` by path, with one JSON job file; the
features of the detections travel as ``.npz`` files.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from typing import Any, Callable, Dict, List, Optional

from reid.utils.file_io import atomic_write_text

BOXMOT_VERSION = "25.0.0"
REQUIREMENT = f"boxmot[trackeval]=={BOXMOT_VERSION}"
SIDE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boxmot_side.py")
_READY = ".circle-reid-ready"
# Written before anything else: a folder holding it (and not _READY) is an environment whose making was
# cut short, the only non-empty folder this module ever clears.
_MAKING = ".circle-reid-making"
Log = Callable[[str], None]


class TrackerEnvError(RuntimeError):
    """The tracker environment cannot be made or used; the message says what to do."""


def default_env_dir() -> str:
    """Where the tracker environment is made: ``$REID_TRACKER_ENV``, else the user's cache."""
    given = os.environ.get("REID_TRACKER_ENV")
    if given:
        return os.path.abspath(os.path.expanduser(given))
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "circle-reid", f"tracker-env-boxmot-{BOXMOT_VERSION}")


def _env_python(env_dir: str) -> str:
    return os.path.join(env_dir, "bin", "python")


def check_python(python: str) -> str:
    """`python` when it imports boxmot (BOXMOT_VERSION) and trackeval; a TrackerEnvError otherwise."""
    code = "import boxmot, trackeval; print(boxmot.__version__)"
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    except OSError as e:
        raise TrackerEnvError(f"--tracker-python {python}: cannot run it ({e.strerror}); name a Python with "
                              f"{REQUIREMENT} installed, or leave --tracker-python out to make one.") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise TrackerEnvError(f"--tracker-python {python}: 'import boxmot, trackeval' failed ({last}); "
                              f"run '{python} -m pip install \"{REQUIREMENT}\"', or leave --tracker-python out.")
    version = proc.stdout.strip()
    if version != BOXMOT_VERSION:
        raise TrackerEnvError(f"--tracker-python {python} has boxmot {version}, and this toolkit drives boxmot "
                              f"{BOXMOT_VERSION} (its tracker API changes between versions); run "
                              f"'{python} -m pip install \"{REQUIREMENT}\"'.")
    return python


def create_env(env_dir: str, log: Log = print) -> str:
    """Make the tracker environment in `env_dir` (once; concurrent callers wait for the first)."""
    os.makedirs(os.path.dirname(env_dir) or ".", exist_ok=True)
    with open(env_dir + ".lock", "a") as lock:  # "a": a file of that name is never truncated
        fcntl.flock(lock, fcntl.LOCK_EX)  # two tools (or test workers) starting at once make it once
        python = _env_python(env_dir)
        if os.path.exists(os.path.join(env_dir, _READY)):
            return python
        half_made = os.path.exists(os.path.join(env_dir, _MAKING))
        if os.path.lexists(env_dir) and (not os.path.isdir(env_dir) or os.listdir(env_dir)) and not half_made:
            raise TrackerEnvError(f"the tracker environment's folder {env_dir} ($REID_TRACKER_ENV, or the cache) holds "
                                  "something that is not a tracker environment of circle-reid, and it is never "
                                  "cleared; name an empty or new folder in REID_TRACKER_ENV (or delete that one if an "
                                  f"earlier making left it), or pass a Python with \"{REQUIREMENT}\" as --tracker-python.")
        if half_made:
            log(f"The tracker environment in {env_dir} was left half-made (its making was cut short); making it again.")
        log(f"Making the tracker environment (BoxMOT {BOXMOT_VERSION} and TrackEval from the package index) "
            f"in {env_dir}; this happens once and takes about a minute.")
        os.makedirs(env_dir, exist_ok=True)
        atomic_write_text(os.path.join(env_dir, _MAKING), REQUIREMENT + "\n")  # first: a cut-short making is known
        for entry in os.scandir(env_dir):  # what a cut-short making left, the marker kept
            if entry.name != _MAKING:
                shutil.rmtree(entry.path) if entry.is_dir(follow_symlinks=False) else os.remove(entry.path)
        _run_steps([[sys.executable, "-m", "venv", env_dir]], env_dir)
        site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        ours = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
        atomic_write_text(os.path.join(site, "_circle_reid_env.pth"), "".join(p + "\n" for p in ours))
        _run_steps([[python, "-m", "pip", "install", "-q", "--disable-pip-version-check", REQUIREMENT]], env_dir)
        check_python(python)
        atomic_write_text(os.path.join(env_dir, _READY), REQUIREMENT + "\n")
        os.remove(os.path.join(env_dir, _MAKING))
        return python


def _run_steps(steps: List[List[str]], env_dir: str) -> None:
    """Run each command; the first that fails is one TrackerEnvError saying what to do."""
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
            raise TrackerEnvError(f"making the tracker environment in {env_dir} failed at '{' '.join(cmd[-3:])}' "
                                  f"({last}); check that the package index is reachable, or install "
                                  f"\"{REQUIREMENT}\" into a Python of your own and pass it as --tracker-python.")


def tracker_python(python: Optional[str] = None, env_dir: Optional[str] = None, log: Log = print) -> str:
    """The Python that runs the trackers: `python` (checked), else the tracker environment (made on first use)."""
    if python:
        return check_python(python)
    env_dir = env_dir or default_env_dir()
    if os.path.exists(os.path.join(env_dir, _READY)):
        python = _env_python(env_dir)
        if not os.access(python, os.X_OK):  # removed or broken since it was made: said, not rebuilt unasked
            raise TrackerEnvError(f"the tracker environment in {env_dir} is marked ready but has no Python ({python}); "
                                  "delete that folder to have it made again, or pass --tracker-python.")
        return python
    return create_env(env_dir, log)


def run_side(python: str, job: Dict[str, Any], job_path: str,
             on_line: Optional[Callable[[Dict[str, Any]], None]] = None) -> None:
    """Run one job of ``boxmot_side.py`` in `python`; `on_line` receives each JSON line it prints."""
    atomic_write_text(job_path, json.dumps(job, indent=1))
    with tempfile.TemporaryFile("w+") as errors:  # a file, not a pipe: TrackEval's chatter cannot block it
        with subprocess.Popen([python, SIDE_SCRIPT, job_path], stdout=subprocess.PIPE, stderr=errors,
                              text=True) as proc:
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    message = _json_line(line)
                    if message is not None and on_line is not None:
                        on_line(message)
                code = proc.wait()
            except BaseException:  # Ctrl-C, or a failing callback: the child must not run on unseen
                proc.kill()
                proc.wait()
                raise
        errors.seek(0)
        err = errors.read()
    if code != 0:
        last = (err.strip().splitlines() or [f"killed by signal {-code}" if code < 0 else "no output"])[-1]
        hint = (" (BoT-SORT's camera-motion compensation needs larger frames: pass --tracker-option use_cmc=false)"
                if "cornerSubPix" in last else "")
        raise TrackerEnvError(f"the {job['command']} job ({job_path}) failed in the tracker environment: {last}{hint}")


def _json_line(line: str) -> Optional[Dict[str, Any]]:
    """A progress message of boxmot_side.py, or None for anything else a library printed."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        message = json.loads(line)
    except json.JSONDecodeError:
        return None
    return message if isinstance(message, dict) else None


__all__ = ["BOXMOT_VERSION", "REQUIREMENT", "TrackerEnvError", "check_python", "create_env", "default_env_dir",
           "run_side", "tracker_python"]
