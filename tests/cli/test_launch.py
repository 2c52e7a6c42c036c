"""tools/launch.py: torchrun's arguments checked before torch loads, exit codes a scheduler reads,
one line for a rendezvous that cannot be made (its endpoint and timeout), never a hang."""
import os
import signal
import subprocess
import sys
import time

import pytest

from reid.cli import launch
from tests._tools import ROOT


def test_every_torchrun_option_of_the_installed_torch_is_known_and_flags_take_no_value():
    from torch.distributed import run as torchrun

    for action in torchrun.get_args_parser()._actions:
        for option in action.option_strings:
            if option in ("-h", "--help"):
                continue
            takes_value = action.nargs != 0
            known = launch.TORCHRUN_OPTIONS if takes_value else launch.TORCHRUN_FLAGS
            assert option in known, f"torchrun's {option} ({'a value' if takes_value else 'a flag'}) is not in launch.py"


def test_the_command_splits_at_the_program_whatever_spelling_of_the_options():
    argv = ["--nnodes", "2", "--nproc_per_node=4", "--standalone", "--rdzv-conf", "join_timeout=5", "--max-rest", "3",
            "tools/train.py", "--config-file", "c.yml", "--resume"]
    assert launch.split_command(argv) == (argv[:8], argv[8:])
    assert launch.split_command(["-m", "reid.cli.train", "--resume"]) == (["-m"], ["reid.cli.train", "--resume"])
    # Spellings torchrun's parser takes: a short option's value attached, "--" ending the options.
    assert launch.split_command(["-r3", "-t", "3", "x.py"]) == (["-r3", "-t", "3"], ["x.py"])
    assert launch.split_command(["--standalone", "--", "x.py", "--resume"]) == (["--standalone", "--"],
                                                                                ["x.py", "--resume"])


@pytest.mark.parametrize("argv, message", [
    (["--nnode", "2", "x.py"], None),  # an unambiguous abbreviation is accepted, as torchrun's parser does
    (["--no-such-flag", "x.py"], "unrecognized torchrun option --no-such-flag"),
    (["--rdzv", "c10d", "x.py"], "ambiguous option --rdzv (could be --rdzv-backend, --rdzv-conf"),
    (["--nnodes"], "option --nnodes needs a value"),
    (["--nnodes", "2"], "no program to launch"),
])
def test_bad_launch_commands_are_one_line(argv, message):
    if message is None:
        assert launch.split_command(argv)[1] == ["x.py"]
        return
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        launch.split_command(argv)


def test_only_stops_by_signal_give_a_requeue_exit_code():
    assert launch.stop_exit_code([143, 143]) == 143
    assert launch.stop_exit_code([138]) == 138 and launch.stop_exit_code([130]) == 130
    assert launch.stop_exit_code([143, 1]) is None  # one process failed: an error, not a stop
    assert launch.stop_exit_code([-9]) is None and launch.stop_exit_code([]) is None
    # The agent ends the others once one has exited: after a stop (the checkpoint is written then).
    assert launch.stop_exit_code([143, -15]) == 143
    assert launch.stop_exit_code([-15, -15]) is None  # killed, nobody saved
    assert launch.stop_exit_code([143, -9]) is None


def _launch(*argv, timeout=120):
    """(the finished process, seconds it took); `timeout` ends a launcher that hangs."""
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    start = time.time()
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "launch.py"), *argv], capture_output=True,
                          text=True, env=env, timeout=timeout)
    return proc, time.time() - start


def _free_port():
    from tests.engine.cluster_runs import free_port

    return free_port()


@pytest.mark.slow
def test_an_unreachable_rendezvous_is_one_line_naming_the_endpoint_and_timeout():
    port = _free_port()  # nothing listens there; is_host=false: this node must connect, not host
    proc, _ = _launch("--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                      f"127.0.0.1:{port}", "--rdzv-id", "j", "--rdzv-conf", "read_timeout=2,is_host=false",
                      os.path.join(ROOT, "tools", "train.py"), "--help")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"error: could not reach the rendezvous at 127.0.0.1:{port} (--rdzv-endpoint) within 2 s, or lost it (the "
        "node that hosts it ended): check the address and port, that the launcher of the node at that address has "
        "started, and that the port is open between the nodes (--rdzv-conf read_timeout=SECONDS waits longer)."]


@pytest.mark.slow
@pytest.mark.parametrize("node_rank, why", [(1, "The client socket has timed out"), (0, "1/2 clients joined")],
                         ids=["the master unreachable", "nobody else joins"])
def test_a_static_rendezvous_that_cannot_form_is_one_line_naming_the_master(node_rank, why):
    port = _free_port()
    proc, _ = _launch("--nnodes", "2", "--node-rank", str(node_rank), "--nproc-per-node", "1", "--master-addr",
                      "127.0.0.1", "--master-port", str(port), "--rdzv-conf", "timeout=2",
                      os.path.join(ROOT, "tools", "train.py"), "--help")
    assert proc.returncode == 1
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: the processes of the job could not meet at 127.0.0.1:{port} "
                           f"(--master-addr/--master-port, node rank {node_rank}) within 2 s (")
    assert why in line and line.endswith("(--rdzv-conf timeout=SECONDS waits longer).")


@pytest.mark.slow
def test_a_rendezvous_the_other_nodes_never_join_ends_after_its_timeout_in_one_line():
    port = _free_port()
    proc, _ = _launch("--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                      f"127.0.0.1:{port}", "--rdzv-id", "lonely", "--rdzv-conf", "join_timeout=3",
                      os.path.join(ROOT, "tools", "train.py"), "--help")
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert lines == [f"error: the rendezvous at 127.0.0.1:{port} did not fill: fewer than --nnodes 2 node(s) joined "
                     "within 3 s (--rdzv-conf join_timeout=SECONDS). Start every node with the same --rdzv-id lonely "
                     f"and --rdzv-endpoint 127.0.0.1:{port}, or lower --nnodes (a range such as 1:2 starts with fewer)."]


@pytest.mark.slow
def test_a_program_that_fails_keeps_torchruns_report_and_exit_code_1(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import sys; sys.exit(3)\n")
    proc, _ = _launch("--standalone", "--nproc-per-node", "1", str(script))
    assert proc.returncode == 1 and "exitcode  : 3" in proc.stderr


@pytest.mark.slow
def test_processes_that_end_as_stopped_runs_give_the_stop_exit_code(tmp_path):
    # What a run stopped by SIGTERM returns (its processes saved, then exited 143), seen by the launcher.
    script = tmp_path / "stopped.py"
    script.write_text("import sys; sys.exit(143)\n")
    proc, _ = _launch("--standalone", "--nproc-per-node", "2", str(script))
    assert proc.returncode == 143, proc.stderr[-2000:]
    assert "launch.py: the training processes were stopped by SIGTERM" in proc.stderr


@pytest.mark.slow
def test_sigusr1_reaches_the_processes_as_a_stop_instead_of_killing_the_launcher(tmp_path):
    script = tmp_path / "waits.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGUSR1, lambda s, f: sys.exit(138))\n"
        f"open({str(tmp_path / 'ready')!r}, 'w').close()\n"
        "time.sleep(120)\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tools", "launch.py"), "--standalone",
                             "--nproc-per-node", "1", str(script)], stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.time() + 60
        while not (tmp_path / "ready").exists():
            assert proc.poll() is None and time.time() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)  # to the launcher alone: it must forward it
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 138 and "stopped by SIGUSR1" in err


@pytest.mark.parametrize("value", ["0", "-2", "two", "3:1", "1:", ":2", "0:2"])
def test_a_number_of_nodes_that_is_none_is_one_line(value, capsys):
    from reid.cli import launch

    with pytest.raises(SystemExit) as info:
        launch.main(["--nnodes", value, "--nproc-per-node", "1", "tools/train.py"])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and f"--nnodes {value!r}: give a number of nodes >= 1" in err[-1]
    with pytest.raises(SystemExit):
        launch.main([f"--nnodes={value}", "tools/train.py"])
    assert "give a number of nodes >= 1" in capsys.readouterr().err


def test_numbers_of_nodes_that_are_some_pass_the_check():
    from reid.cli.launch import check_nnodes

    for options in (["--nnodes", "2"], ["--nnodes=1:4"], ["--nnod", "3"], ["--nproc-per-node", "0"]):
        check_nnodes(options)
