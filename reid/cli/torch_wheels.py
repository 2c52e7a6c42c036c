"""Install torch + torchvision into a virtual environment from the right source (``make setup``).

On Linux the package index's torch is a CUDA build: about 4 GB of NVIDIA libraries and
triton come with it, useless on a machine without an NVIDIA GPU. So, by default (``auto``):

* an NVIDIA GPU answers the probe (``nvidia-smi -L``): the package index's build (CUDA);
* none does, on Linux: PyTorch's CPU wheels (``--cpu-index-url``), when that index answers
  within ``--timeout`` seconds; otherwise the package index's build, and one line says so;
* other systems: the package index's build (it has no CUDA libraries there).

``--build default`` takes the package index's build without probing or contacting anything
else (what CI states); ``--build cpu`` insists on the CPU index; an explicit ``--index-url``
(the Makefile's ``TORCH_INDEX_URL``) wins over everything. The versions are the pins of
requirements/ci.txt; the CPU wheels' ``+cpu`` versions satisfy them, so the project's own
install afterwards keeps them.

Standard library only: it runs before anything is installed.
"""
from __future__ import annotations

import argparse
import os
import platform
import shlex
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

CPU_INDEX_URL = "https://download.pytorch.org/whl/cpu"
GPU_PROBE = "nvidia-smi -L"
BUILDS = ("auto", "cpu", "default")


class Choice(NamedTuple):
    """Where torch comes from: `index_url` (None: the package index's default build) and why."""

    index_url: Optional[str]
    reason: str


def gpu_present(probe: str = GPU_PROBE, timeout: float = 20.0) -> bool:
    """Whether the probe command exits with 0 (``nvidia-smi -L`` does when it lists a GPU)."""
    try:
        return subprocess.run(shlex.split(probe), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=timeout).returncode == 0
    except (OSError, subprocess.TimeoutExpired):  # no such command, or a driver that hangs
        return False


def index_reachable(url: str, timeout: float = 5.0) -> Tuple[bool, str]:
    """Whether pip could read the index at `url` (its torch page answers); else (False, why)."""
    page = url.rstrip("/") + "/torch/"
    if page.startswith("file://"):
        path = os.path.normpath(urllib.request.url2pathname(page[len("file://"):]))
        return (True, "") if os.path.isdir(path) else (False, f"{path} does not exist")
    try:
        with urllib.request.urlopen(urllib.request.Request(page, method="HEAD"), timeout=timeout):
            return True, ""
    except urllib.error.HTTPError as e:
        return False, f"HTTP {e.code}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return False, str(reason) or type(reason).__name__


def choose(build: str = "auto", index_url: str = "", cpu_index_url: str = CPU_INDEX_URL,
           probe: Callable[[], bool] = gpu_present,
           reachable: Callable[[str], Tuple[bool, str]] = index_reachable,
           system: Optional[str] = None) -> Choice:
    """Decide where torch comes from (see the module docstring); contacts only `cpu_index_url`,
    and only when ``auto`` found no GPU on Linux, or with ``cpu``."""
    if index_url:
        return Choice(index_url, f"TORCH_INDEX_URL={index_url}")
    if build not in BUILDS:
        raise ValueError(f"TORCH_BUILD={build!r}: use one of {', '.join(BUILDS)}.")
    if build == "default":
        return Choice(None, "the package index's default build (TORCH_BUILD=default)")
    if build == "auto":
        system = system or platform.system()
        if system != "Linux":
            return Choice(None, f"the package index's build ({system}: it has no CUDA libraries there)")
        if probe():
            return Choice(None, "the package index's CUDA build (an NVIDIA GPU answered the probe)")
    ok, why = reachable(cpu_index_url)
    if ok:
        return Choice(cpu_index_url, f"PyTorch's CPU wheels from {cpu_index_url} (no NVIDIA GPU found)"
                      if build == "auto" else f"PyTorch's CPU wheels from {cpu_index_url} (TORCH_BUILD=cpu)")
    if build == "cpu":
        raise OSError(f"TORCH_BUILD=cpu, but the CPU wheel index {cpu_index_url} cannot be reached ({why}); "
                      "drop TORCH_BUILD to fall back to the package index's build, or set TORCH_INDEX_URL.")
    return Choice(None, f"the package index's default build: no NVIDIA GPU found, but the CPU wheel index "
                        f"{cpu_index_url} cannot be reached ({why}), so NVIDIA libraries come too (~4 GB)")


def pinned(requirements: str, names: Sequence[str] = ("torch", "torchvision")) -> List[str]:
    """``name==version`` of each of `names` pinned in the requirements file."""
    pins = {}
    with open(requirements, encoding="utf-8") as f:
        for line in f:
            name, sep, version = line.split("#")[0].strip().partition("==")
            if sep:
                pins[name.strip().lower()] = f"{name.strip()}=={version.strip()}"
    missing = [n for n in names if n not in pins]
    if missing:
        raise ValueError(f"{requirements} pins no {', '.join(missing)} (expected lines like torch==2.14.1).")
    return [pins[n] for n in names]


def install_command(python: str, choice: Choice, packages: Sequence[str]) -> List[str]:
    """The pip command that installs `packages` from `choice`'s source."""
    source = ["--index-url", choice.index_url] if choice.index_url else []
    return [python, "-m", "pip", "install", *source, *packages]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help="the virtual environment's python")
    parser.add_argument("--requirements", default="requirements/ci.txt", help="file with the torch/torchvision pins")
    parser.add_argument("--build", default="auto", choices=BUILDS, help="auto (default), cpu or default (see above)")
    parser.add_argument("--index-url", default="", help="take torch from this index, nothing else decided (TORCH_INDEX_URL)")
    parser.add_argument("--cpu-index-url", default=CPU_INDEX_URL, help=f"PyTorch's CPU wheels (default: {CPU_INDEX_URL})")
    parser.add_argument("--gpu-probe", default=GPU_PROBE, help=f"command that exits 0 when an NVIDIA GPU is present "
                                                               f"(default: {GPU_PROBE})")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the CPU index (default: 5)")
    parser.add_argument("--dry-run", action="store_true", help="only print the choice and the pip command")
    args = parser.parse_args(argv)
    try:
        packages = pinned(args.requirements)
        choice = choose(args.build, args.index_url, args.cpu_index_url, probe=lambda: gpu_present(args.gpu_probe),
                        reachable=lambda url: index_reachable(url, args.timeout))
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"torch: {choice.reason}", flush=True)
    command = install_command(args.python, choice, packages)
    if args.dry_run:
        print(shlex.join(command))
        return 0
    return subprocess.run(command).returncode


__all__ = ["Choice", "choose", "gpu_present", "index_reachable", "install_command", "main", "pinned"]
