"""Where `make setup` takes torch from (reid/cli/torch_wheels.py and the Makefile around it).

The GPU probe and the CPU wheel index are always mocked: a probe command that exits 0 or 1,
indexes that are folders of tiny fake wheels, and an "index" that is a local socket that never
answers. Nothing here contacts a host.
"""
import base64
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
import zipfile

import pytest

from reid.cli import torch_wheels
from reid.cli.torch_wheels import Choice, choose, index_reachable, install_command, pinned

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CPU = "https://cpu.example/whl/cpu"


def never(url):
    raise AssertionError(f"contacted {url}")


def test_a_gpu_gets_the_package_index_build_without_contacting_the_cpu_index():
    choice = choose("auto", probe=lambda: True, reachable=never, system="Linux")
    assert choice.index_url is None and "CUDA build" in choice.reason


def test_no_gpu_on_linux_takes_the_cpu_wheels_when_their_index_answers():
    asked = []
    choice = choose("auto", cpu_index_url=CPU, probe=lambda: False,
                    reachable=lambda url: asked.append(url) or (True, ""), system="Linux")
    assert choice == Choice(CPU, f"PyTorch's CPU wheels from {CPU} (no NVIDIA GPU found)")
    assert asked == [CPU]


def test_an_unreachable_cpu_index_falls_back_to_the_default_build_and_says_why():
    choice = choose("auto", cpu_index_url=CPU, probe=lambda: False,
                    reachable=lambda url: (False, "timed out"), system="Linux")
    assert choice.index_url is None
    assert CPU in choice.reason and "timed out" in choice.reason and "NVIDIA libraries" in choice.reason
    # Asked for explicitly, the CPU wheels are not silently replaced.
    with pytest.raises(OSError, match="TORCH_BUILD=cpu.*cannot be reached.*timed out"):
        choose("cpu", cpu_index_url=CPU, reachable=lambda url: (False, "timed out"))


def test_explicit_choices_win_and_contact_nothing():
    assert choose("auto", index_url="https://mirror/whl", probe=never, reachable=never).index_url == "https://mirror/whl"
    default = choose("default", probe=never, reachable=never)
    assert default.index_url is None and "TORCH_BUILD=default" in default.reason
    # Off Linux the package index's torch has no CUDA libraries: nothing to probe or fetch.
    assert choose("auto", probe=never, reachable=never, system="Darwin").index_url is None
    with pytest.raises(ValueError, match="TORCH_BUILD='gpu'.*auto, cpu, default"):
        choose("gpu")


def test_the_probe_is_the_exit_code_of_a_command():
    assert torch_wheels.gpu_present("true") and not torch_wheels.gpu_present("false")
    assert not torch_wheels.gpu_present("no-such-command-anywhere")


def test_pins_and_pip_command(tmp_path):
    assert pinned(os.path.join(ROOT, "requirements", "ci.txt")) == ["torch==2.14.1", "torchvision==0.29.1"]
    assert pinned(os.path.join(ROOT, "requirements", "min.txt")) == ["torch==2.6.0", "torchvision==0.21.0"]
    (tmp_path / "r.txt").write_text("numpy==2.0\n")
    with pytest.raises(ValueError, match="pins no torch, torchvision"):
        pinned(str(tmp_path / "r.txt"))
    assert install_command("py", Choice(CPU, ""), ["torch==1"]) == ["py", "-m", "pip", "install", "--index-url", CPU,
                                                                    "torch==1"]
    assert install_command("py", Choice(None, ""), ["torch==1"]) == ["py", "-m", "pip", "install", "torch==1"]


def test_a_silent_index_times_out_quickly(tmp_path):
    with socket.socket() as server:  # accepts connections, never answers
        server.bind(("127.0.0.1", 0))
        server.listen()
        start = time.monotonic()
        ok, why = index_reachable(f"http://127.0.0.1:{server.getsockname()[1]}/whl/cpu", timeout=0.3)
        assert not ok and "timed out" in why and time.monotonic() - start < 3
    assert index_reachable((tmp_path / "none").as_uri()) == (False, f"{tmp_path / 'none' / 'torch'} does not exist")
    (tmp_path / "cpu" / "torch").mkdir(parents=True)
    assert index_reachable((tmp_path / "cpu").as_uri()) == (True, "")


# ----------------------------------------------------------------------------------------
# The Makefile's step, with fake wheels: `pip list` shows what each route installs.
# ----------------------------------------------------------------------------------------
def fake_wheel(folder, name, version, requires=()):
    """A minimal pure-Python wheel `name`-`version` that depends on `requires`, in an index layout."""
    dist = f"{name.replace('-', '_')}-{version}"
    info = f"{dist}.dist-info"
    files = {
        f"{name.replace('-', '_')}_fake/__init__.py": "",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
            name, version, "".join(f"Requires-Dist: {r}\n" for r in requires)),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    project = folder / name.lower().replace("_", "-")
    project.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(project / f"{dist}-py3-none-any.whl", "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    links = "".join(f'<a href="{w.name}">{w.name}</a>\n' for w in sorted(project.glob("*.whl")))
    (project / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    """A fake package index (torch with an NVIDIA dependency, like the Linux CUDA build) and a
    fake CPU wheel index (torch 2.14.1+cpu, no NVIDIA dependency)."""
    base = tmp_path_factory.mktemp("indexes")
    default, cpu = base / "default" / "simple", base / "cpu"
    fake_wheel(default, "nvidia-cublas-fake", "13.0")
    fake_wheel(default, "torch", "2.14.1", ["nvidia-cublas-fake"])
    fake_wheel(default, "torchvision", "0.29.1", ["torch==2.14.1"])
    fake_wheel(cpu, "torch", "2.14.1+cpu")
    fake_wheel(cpu, "torchvision", "0.29.1+cpu", ["torch==2.14.1"])
    return default.as_uri(), cpu.as_uri()


def make_torch_step(tmp_path, indexes, **variables):
    """`make <venv>/.torch` (the Makefile's torch step) offline; (make's result, `pip list`)."""
    default, cpu = indexes
    venv = tmp_path / "venv"
    # pip reads only these fake indexes: no configuration file, no find-links, no other host. And
    # the make that runs this test (`make test TORCH_BUILD=default`, as CI does) hands its variables
    # to every make below it through MAKEFLAGS: the step under test must not inherit them.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PIP_") and k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "TORCH_BUILD",
                                                       "TORCH_INDEX_URL")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=default, PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_CACHE_DIR="1", PIP_DEFAULT_TIMEOUT="5")
    settings = {"VENV": str(venv), "PYTHON": sys.executable, "TORCH_CPU_INDEX_URL": cpu, **variables}
    proc = subprocess.run(["make", "-C", ROOT, f"{venv}/.torch"] + [f"{k}={v}" for k, v in settings.items()],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True, env=env, check=True).stdout
    return proc, {line.split("==")[0].lower(): line.split("==")[1] for line in listed.split()}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_installs_no_nvidia_package_without_a_gpu_and_the_cuda_build_with_one(tmp_path, indexes):
    proc, packages = make_torch_step(tmp_path / "no_gpu", indexes, GPU_PROBE="false")
    assert packages["torch"] == "2.14.1+cpu" and packages["torchvision"] == "0.29.1+cpu"
    assert not [p for p in packages if p.startswith("nvidia")], packages
    assert "torch: PyTorch's CPU wheels from" in proc.stdout
    # The project's install that follows asks for the pins again: the +cpu builds satisfy them.
    venv_python = str(tmp_path / "no_gpu" / "venv" / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=indexes[0])
    subprocess.run([venv_python, "-m", "pip", "install", "-c", os.path.join(ROOT, "requirements", "ci.txt"),
                    "torch", "torchvision"], capture_output=True, env=env, check=True)
    listed = subprocess.run([venv_python, "-m", "pip", "list"], capture_output=True, text=True, env=env).stdout
    assert "nvidia" not in listed and "2.14.1+cpu" in listed

    proc, packages = make_torch_step(tmp_path / "gpu", indexes, GPU_PROBE="true")
    assert packages["torch"] == "2.14.1" and "nvidia-cublas-fake" in packages
    assert "torch: the package index's CUDA build" in proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_falls_back_to_the_default_build_in_one_line_when_the_cpu_index_is_silent(tmp_path, indexes):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        silent = f"http://127.0.0.1:{server.getsockname()[1]}/whl/cpu"
        proc, packages = make_torch_step(tmp_path, indexes, GPU_PROBE="false", TORCH_CPU_INDEX_URL=silent,
                                         TORCH_INDEX_TIMEOUT="0.5")
    said = [line for line in proc.stdout.splitlines() if line.startswith("torch:")]
    assert len(said) == 1 and silent in said[0] and "cannot be reached (timed out)" in said[0], proc.stdout
    assert packages["torch"] == "2.14.1"  # the package index's build


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_ci_states_the_package_index_build(tmp_path, indexes):
    ci = open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
    assert "make test TORCH_BUILD=default" in ci and "TORCH_BUILD=default" in ci.split("make setup-min", 1)[1]
    # TORCH_BUILD=default neither probes nor contacts the CPU index (both would fail the test here).
    proc, packages = make_torch_step(tmp_path, indexes, TORCH_BUILD="default", GPU_PROBE="no-such-probe",
                                     TORCH_CPU_INDEX_URL="http://127.0.0.1:9/never")
    assert "torch: the package index's default build (TORCH_BUILD=default)" in proc.stdout
    assert packages["torch"] == "2.14.1"
