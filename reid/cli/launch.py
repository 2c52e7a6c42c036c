"""``tools/launch.py``: torchrun with answers a cluster scheduler can act on.

It takes torchrun's own arguments and runs torchrun's launcher in this process, adding:

* SIGUSR1, which SLURM's ``--signal`` sends ahead of a time limit, is forwarded to the training
  processes as a stop, like SIGTERM (torchrun's agent would otherwise die of it at once);
* a job stopped by a signal exits with 128 + the signal's number (143 for SIGTERM, 138 for
  SIGUSR1, 130 for SIGINT) after every process has stopped and rank 0 has saved, instead of
  torchrun's exit code 1 and traceback: the code a batch script or a Kubernetes
  ``podFailurePolicy`` reads as "requeue me, then --resume";
* a rendezvous that cannot be reached, or that not enough nodes join in time, is one line naming
  the endpoint and the timeout;
* processes restarted after a failure (``--max-restarts``) meet again: they get a store of their
  own instead of the agent's (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` unless set).

Arguments are checked against torchrun's option names before torch is loaded (``--help`` and a
misspelt option answer at once); torchrun's own parser then has the final word.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from .args import tool_parser

EPILOG = """examples:
  # two nodes, four GPUs each; the same command on both (SLURM: srun runs it once per node)
  python tools/launch.py --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint node1:29400 \\
      --rdzv-id $SLURM_JOB_ID --max-restarts 3 tools/train.py --config-file configs/MSMT17/mgn_circle.yml --resume
  # one machine, two processes
  python tools/launch.py --standalone --nproc-per-node 2 tools/train.py --config-file ... --resume

Every torchrun option is accepted (torchrun --help lists them). Give the training command --resume, so
that a restart (--max-restarts, a requeued job) continues from the last checkpoint.

exit codes: 0 done; 128 + signal when the job was stopped by a signal after saving (143 SIGTERM,
138 SIGUSR1, 130 SIGINT): rerun the same command to resume; 1 an error (one line for a rendezvous
that cannot be reached or filled; torchrun's report for a failed process)."""

# torchrun's options over the torch versions this package supports (torch.distributed.run's
# parser; tests/cli/test_launch.py checks that the installed torch has no option missing here).
# Flags take no value; every other option takes one.
TORCHRUN_FLAGS = ("--standalone", "-m", "--module", "--no-python", "--no_python", "--run-path", "--run_path",
                  "--virtual-local-rank", "--virtual_local_rank")
TORCHRUN_OPTIONS = (
    "--nnodes", "--nproc-per-node", "--nproc_per_node", "--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint",
    "--rdzv_endpoint", "--rdzv-id", "--rdzv_id", "--rdzv-conf", "--rdzv_conf", "--max-restarts", "--max_restarts",
    "--monitor-interval", "--monitor_interval", "--start-method", "--start_method", "--event-log-handler",
    "--event_log_handler", "--role", "--log-dir", "--log_dir", "-r", "--redirects", "-t", "--tee",
    "--log-line-prefix-template", "--log_line_prefix_template", "--local-ranks-filter", "--local_ranks_filter",
    "--duplicate-stdout-filters", "--duplicate_stdout_filters", "--duplicate-stderr-filters",
    "--duplicate_stderr_filters", "--node-rank", "--node_rank", "--master-addr", "--master_addr", "--master-port",
    "--master_port", "--local-addr", "--local_addr", "--logs-specs", "--logs_specs", "--numa-binding",
    "--numa_binding", "--signals-to-handle", "--signals_to_handle", "--shutdown-timeout", "--shutdown_timeout",
    "--print-completion", "--print_completion",
)
# The short options that take a value, which may be attached (-r3).
_SHORT_WITH_VALUE = ("-r", "-t")
# What torchrun's agent forwards to its processes: its defaults plus SLURM's warning.
SIGNALS_TO_HANDLE = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
# Seconds torchrun's agent waits for its processes after forwarding a stop before it kills them
# (torchrun's own default is 30 s, often too short to write a large checkpoint to network storage).
SHUTDOWN_TIMEOUT = 300


def _option_name(token: str) -> str:
    """The torchrun option `token` (``--opt`` or ``--opt=value``) names, resolving unique
    abbreviations as argparse does; ValueError when it names none."""
    name = token.partition("=")[0]
    known = ("-h", "--help") + TORCHRUN_FLAGS + TORCHRUN_OPTIONS
    if name in known:
        return name
    matches = sorted({k for k in known if name.startswith("--") and k.startswith(name)})
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ValueError(f"ambiguous option {name} (could be {', '.join(matches)})")
    raise ValueError(f"unrecognized torchrun option {name} (torchrun --help lists them)")


def split_command(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
    """(torchrun options, the program and its arguments) of a launch command line."""
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        if argv[i] == "--":  # the end of the options, as for torchrun's parser
            i += 1
            break
        if argv[i][:2] in _SHORT_WITH_VALUE and len(argv[i]) > 2:  # -r3, -t3: the value attached
            i += 1
            continue
        name = _option_name(argv[i])
        if name in TORCHRUN_FLAGS + ("-h", "--help") or "=" in argv[i]:
            i += 1
        elif i + 1 < len(argv):
            i += 2
        else:
            raise ValueError(f"option {name} needs a value")
    if i == len(argv):
        raise ValueError("no program to launch: give it after the options, e.g. tools/train.py --config-file F --resume")
    return list(argv[:i]), list(argv[i:])


def _conf(text: Optional[str]) -> Dict[str, str]:
    pairs = (part.partition("=") for part in str(text or "").split(",") if "=" in part)
    return {k.strip(): v.strip() for k, _, v in pairs}


def rendezvous_message(error: BaseException, args) -> str:
    """One line for a rendezvous torchrun could not make: the endpoint, the timeout, what to do."""
    from torch.distributed.elastic.rendezvous.api import (RendezvousConnectionError, RendezvousError,
                                                          RendezvousTimeoutError)

    conf = _conf(getattr(args, "rdzv_conf", ""))
    endpoint = getattr(args, "rdzv_endpoint", "") or f"{getattr(args, 'master_addr', '')}:{getattr(args, 'master_port', '')}"
    run_id = getattr(args, "rdzv_id", "none")
    if isinstance(error, RendezvousConnectionError):
        timeout = conf.get("read_timeout", "60")
        return (f"could not reach the rendezvous at {endpoint} (--rdzv-endpoint) within {timeout} s, or lost it "
                "(the node that hosts it ended): check the address and port, that the launcher of the node at that "
                "address has started, and that the port is open between the nodes (--rdzv-conf "
                "read_timeout=SECONDS waits longer).")
    if not isinstance(error, RendezvousError):  # torch.distributed's DistError: the static rendezvous
        timeout = conf.get("timeout", "600")
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return (f"the processes of the job could not meet at {endpoint} (--master-addr/--master-port, node rank "
                f"{getattr(args, 'node_rank', 0)}) within {timeout} s ({first}): check the address and port, that "
                "every node started, and that the port is open (--rdzv-conf timeout=SECONDS waits longer).")
    if isinstance(error, RendezvousTimeoutError):
        timeout = conf.get("join_timeout", "600")
        return (f"the rendezvous at {endpoint} did not fill: fewer than --nnodes {args.nnodes} node(s) joined "
                f"within {timeout} s (--rdzv-conf join_timeout=SECONDS). Start every node with the same "
                f"--rdzv-id {run_id} and --rdzv-endpoint {endpoint}, or lower --nnodes (a range such as 1:2 "
                "starts with fewer).")
    cause = f" ({error.__cause__})" if error.__cause__ is not None else ""
    return (f"the rendezvous at {endpoint} failed: {error}{cause}; check that --rdzv-endpoint names a host and port "
            "every node reaches, and that every node uses the same --rdzv-backend and --rdzv-id.")


def stop_exit_code(exit_codes: Sequence[int]) -> Optional[int]:
    """128 + signal when the processes ended as a job stopped by a signal does, else None.

    A training process exits with 128 + signal only after the stop's checkpoint is written (all
    processes wait for it), so one such exit is the evidence; the others may then have been ended
    by torchrun's agent with the same signal (exit code -signal) before they exited themselves.
    """
    from reid.utils.stop_request import STOP_SIGNALS

    codes = set(exit_codes)
    stopped = codes & {128 + int(s) for s in STOP_SIGNALS}
    ended = {-int(s) for s in STOP_SIGNALS}
    return max(stopped) if stopped and codes <= stopped | ended else None


def _signal_name(code: int) -> str:
    return signal.Signals(code - 128).name


def _import_torchrun():
    """torch.distributed.run, with PyTorch's C++ log (warnings, errors) off in this process only: a rendezvous
    that cannot be reached otherwise prints a stack trace per connection retry before the one line
    below. The training processes inherit the environment as the user set it."""
    before = os.environ.get("TORCH_CPP_LOG_LEVEL")
    if before is None:
        os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    try:
        from torch.distributed import run as torchrun
    finally:
        if before is None:
            del os.environ["TORCH_CPP_LOG_LEVEL"]
    return torchrun


def _launch(argv: List[str]) -> int:
    torchrun = _import_torchrun()
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed import DistError
    from torch.distributed.elastic.rendezvous.api import RendezvousError

    from reid.utils.stop_request import STOP_SIGNALS

    args = torchrun.parse_args(argv)
    # The training processes get a store of their own rather than the agent's: with the shared
    # one, processes restarted after a failure (--max-restarts) can read the previous attempt's
    # addresses and fail to connect (pytorch/pytorch#135712; seen here with two nodes and gloo).
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    if not hasattr(args, "signals_to_handle"):
        # Older torchrun handles only SIGTERM, SIGINT, SIGHUP, SIGQUIT: SIGUSR1 becomes the same
        # stop here (its agent forwards the signal it stopped for to the processes).
        def stop(signum, frame):
            raise SignalException(f"Process {os.getpid()} got signal: {signum}", sigval=signal.Signals(signum))

        signal.signal(signal.SIGUSR1, stop)
    elif args.signals_to_handle == torchrun.get_args_parser().get_default("signals_to_handle"):
        args.signals_to_handle = SIGNALS_TO_HANDLE  # a list the user gave wins
    if getattr(args, "shutdown_timeout", 0) is None and "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" not in os.environ:
        args.shutdown_timeout = SHUTDOWN_TIMEOUT  # older torchrun: 30 s, fixed
    try:
        torchrun.run(args)
    except SignalException as e:
        code = 128 + int(e.sigval)
        if int(e.sigval) in STOP_SIGNALS:
            what = ("the training processes were asked to stop; a training run saves its checkpoint before it ends "
                    "(its log.txt names the file)")
        else:
            what = "the training processes were ended without a checkpoint of their own"
        print(f"launch.py: stopped by {_signal_name(code)}: {what}. Run the same command again to resume from the "
              f"run's last checkpoint (exit code {code}).", file=sys.stderr)
        return code
    except ChildFailedError as e:
        code = stop_exit_code([f.exitcode for f in e.failures.values()])
        if code is None:
            print(e.format_msg(), file=sys.stderr)
            return 1
        print(f"launch.py: the training processes were stopped by {_signal_name(code)} after writing their "
              f"checkpoint; run the same command again to resume (exit code {code}).", file=sys.stderr)
        return code
    except (RendezvousError, DistError) as e:
        print(f"error: {rendezvous_message(e, args)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C before torchrun's agent handles signals: while waiting for the rendezvous
        print("launch.py: stopped by SIGINT before the training processes started (waiting for the other nodes); "
              "nothing ran: run the same command again (exit code 130).", file=sys.stderr)
        return 130
    return 0


def check_nnodes(options: Sequence[str]) -> None:
    """A ValueError for a --nnodes that is not a count >= 1 or a range MIN:MAX of them (torchrun answers those
    with a traceback)."""
    for i, token in enumerate(options):
        name, eq, value = token.partition("=")
        if name.startswith("--") and "--nnodes".startswith(name) and len(name) > 3:
            value = value if eq else (options[i + 1] if i + 1 < len(options) else "")
            low, colon, high = value.partition(":")
            counts = [low, high] if colon else [low]
            if not all(c.isdigit() and int(c) >= 1 for c in counts) or (colon and int(low) > int(high)):
                raise ValueError(f"--nnodes {value!r}: give a number of nodes >= 1, or a range MIN:MAX with "
                                 "1 <= MIN <= MAX (e.g. 2, or 1:4 for elastic training)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Launch a training (or extraction, evaluation) over processes and nodes; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = tool_parser("Run torchrun for a cluster: the same arguments, exit codes and one-line errors a "
                         "scheduler can act on.", EPILOG)
    parser.usage = "launch.py [torchrun options] PROGRAM [PROGRAM ARGUMENTS]"
    try:
        options, _ = split_command(argv)
        check_nnodes(options)
    except ValueError as e:
        if not {"-h", "--help"} & set(argv):
            parser.error(str(e))
        options = argv
    if {"-h", "--help"} & set(options):
        parser.print_help()
        return 0
    return _launch(argv)


__all__ = ["check_nnodes", "main", "rendezvous_message", "split_command", "stop_exit_code"]
