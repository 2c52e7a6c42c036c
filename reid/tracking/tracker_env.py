"""The separate Python in which BoxMOT's trackers and TrackEval run, and the calls into it.

BoxMOT (the maintained library with BoT-SORT, DeepOCSORT and StrongSORT that take appearance
features) pins OpenCV < 5 and gdown < 6, which conflict with this toolkit's requirements, so
it is not installed beside it. Instead, on first use, a virtual environment is made with
``pip install boxmot[trackeval]==VERSION`` from the package index, with this environment's
packages underneath (a ``.pth`` file), so torch and numpy are not installed twice and only
BoxMOT, its pinned OpenCV and TrackEval are added (about 15 s and 300 MB).

The BoxMOT versions from :data:`SUPPORTED`'s first to its last are driven (their differences:
reid/tracking/boxmot_compat.py); the environment is made with :data:`BOXMOT_VERSION` (the newest)
unless ``$REID_BOXMOT_VERSION`` names another supported one. It lives in ``$REID_TRACKER_ENV`` or
``~/.cache/circle-reid/tracker-env-boxmot-<version>``; ``--tracker-python`` names another Python
that has boxmot (a supported version) and trackeval.

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

from .boxmot_compat import DEFAULT, NEWEST, OLDEST, VERSION_VARIABLE, check_version, chosen_version

#: The oldest and the newest BoxMOT release driven (both tested in CI); any release between them is taken.
SUPPORTED = (OLDEST, NEWEST)
#: The version the tracker environment is made with unless ``$REID_BOXMOT_VERSION`` names another.
BOXMOT_VERSION = DEFAULT


def requirement(version: str = BOXMOT_VERSION) -> str:
    """What pip installs into the tracker environment for BoxMOT `version`."""
    return f"boxmot[trackeval]=={version}"


REQUIREMENT = requirement(BOXMOT_VERSION)
SIDE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boxmot_side.py")
_READY = ".circle-reid-ready"
# Written before anything else: a folder holding it (and not _READY) is an environment whose making was
# cut short, the only non-empty folder this module ever clears.
_MAKING = ".circle-reid-making"
Log = Callable[[str], None]


class TrackerEnvError(RuntimeError):
    """The tracker environment cannot be made or used; the message says what to do."""


def default_env_dir() -> str:
    """Where the tracker environment is made: ``$REID_TRACKER_ENV``, else the user's cache (a folder per
    BoxMOT version: :func:`made_version`)."""
    given = os.environ.get("REID_TRACKER_ENV")
    if given:
        return os.path.abspath(os.path.expanduser(given))
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "circle-reid", f"tracker-env-boxmot-{made_version()}")


def made_version() -> str:
    """The BoxMOT version a tracker environment is made with: ``$REID_BOXMOT_VERSION``, else BOXMOT_VERSION;
    a TrackerEnvError naming the range for a version outside it."""
    try:
        return chosen_version()
    except ValueError as e:
        raise TrackerEnvError(f"{e} Set {VERSION_VARIABLE} to a version in that range, or unset it for "
                              f"{BOXMOT_VERSION}.") from None


def _env_python(env_dir: str) -> str:
    return os.path.join(env_dir, "bin", "python")


def check_python(python: str) -> str:
    """`python` when it imports boxmot (a version in SUPPORTED's range) and trackeval; a TrackerEnvError otherwise."""
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
    version = (proc.stdout.strip().splitlines() or ["(none)"])[-1]
    try:
        check_version(version, f"--tracker-python {python}: ")
    except ValueError as e:
        raise TrackerEnvError(f"{e} Run '{python} -m pip install \"{REQUIREMENT}\"'.") from None
    return python


def _check_made_with(env_dir: str) -> None:
    """A TrackerEnvError when ``$REID_BOXMOT_VERSION`` names a version and the ready environment in `env_dir`
    was made with another (it is used as it is otherwise: any supported version is)."""
    if not os.environ.get(VERSION_VARIABLE, "").strip():
        return
    wanted = requirement(made_version())
    with open(os.path.join(env_dir, _READY), encoding="utf-8", errors="replace") as f:
        made = f.read().strip()
    if made.startswith("boxmot") and made != wanted:
        raise TrackerEnvError(f"the tracker environment in {env_dir} was made with {made}, and {VERSION_VARIABLE} "
                              f"asks for {wanted}; name another folder in REID_TRACKER_ENV, or unset "
                              f"{VERSION_VARIABLE} to use that one.")


def create_env(env_dir: str, log: Log = print) -> str:
    """Make the tracker environment in `env_dir` (once; concurrent callers wait for the first) with BoxMOT
    :func:`made_version`."""
    version = made_version()
    req = requirement(version)
    os.makedirs(os.path.dirname(env_dir) or ".", exist_ok=True)
    with open(env_dir + ".lock", "a") as lock:  # "a": a file of that name is never truncated
        fcntl.flock(lock, fcntl.LOCK_EX)  # two tools (or test workers) starting at once make it once
        python = _env_python(env_dir)
        if os.path.exists(os.path.join(env_dir, _READY)):
            _check_made_with(env_dir)
            return python
        half_made = os.path.exists(os.path.join(env_dir, _MAKING))
        if os.path.lexists(env_dir) and (not os.path.isdir(env_dir) or os.listdir(env_dir)) and not half_made:
            raise TrackerEnvError(f"the tracker environment's folder {env_dir} ($REID_TRACKER_ENV, or the cache) holds "
                                  "something that is not a tracker environment of circle-reid, and it is never "
                                  "cleared; name an empty or new folder in REID_TRACKER_ENV (or delete that one if an "
                                  f"earlier making left it), or pass a Python with \"{req}\" as --tracker-python.")
        if half_made:
            log(f"The tracker environment in {env_dir} was left half-made (its making was cut short); making it again.")
        log(f"Making the tracker environment (BoxMOT {version} and TrackEval from the package index) "
            f"in {env_dir}; this happens once and takes about a minute.")
        os.makedirs(env_dir, exist_ok=True)
        atomic_write_text(os.path.join(env_dir, _MAKING), req + "\n")  # first: a cut-short making is known
        for entry in os.scandir(env_dir):  # what a cut-short making left, the marker kept
            if entry.name != _MAKING:
                shutil.rmtree(entry.path) if entry.is_dir(follow_symlinks=False) else os.remove(entry.path)
        _run_steps([[sys.executable, "-m", "venv", env_dir]], env_dir)
        site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        ours = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
        atomic_write_text(os.path.join(site, "_circle_reid_env.pth"), "".join(p + "\n" for p in ours))
        _run_steps([[python, "-m", "pip", "install", "-q", "--disable-pip-version-check", req]], env_dir)
        check_python(python)
        atomic_write_text(os.path.join(env_dir, _READY), req + "\n")
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
                                  f"\"{requirement(made_version())}\" into a Python of your own and pass it as "
                                  "--tracker-python.")


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
        _check_made_with(env_dir)
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


__all__ = ["BOXMOT_VERSION", "REQUIREMENT", "SUPPORTED", "TrackerEnvError", "check_python", "create_env",
           "default_env_dir", "made_version", "requirement", "run_side", "tracker_python"]
