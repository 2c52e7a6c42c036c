"""How every tool names a trained model: ``--run DIR``, ``--weights FILE``, or ``--config-file
FILE`` with ``KEY VALUE`` overrides (docs/getting_started.md, "Naming a model").

Light on purpose (argparse only): the parser answers ``--help`` and argument errors before
torch is imported; the model is loaded by :func:`predictor_from_args` / :func:`model_config`
once the arguments are known to be right.
"""
from __future__ import annotations

import argparse
import os
import re
from typing import TYPE_CHECKING, Any, Sequence, Tuple

from .args import overrides

if TYPE_CHECKING:  # loading a model imports torch; only the types are needed here
    from yacs.config import CfgNode

    from reid.inference.predictor import Predictor

RUN_HELP = "a training run's folder (its OUTPUT_DIR): config.yaml + model_best.pth, else model_final.pth"
WEIGHTS_HELP = ("a checkpoint: ours (it stores its config) or a foreign format such as fast-reid's "
                "(add --config-file); a published model by name (torchreid/osnet_x0_25_msmt17: downloaded once, "
                "verified, with its config; `tools/hub.py list`), hf://ORG/REPO[/FILE] or a tools/publish.py folder; "
                "or an exported file (.onnx / .pt2 of tools/export.py, any precision), which "
                "runs on its own; with --run, a file of that run (an exported one is checked against the run's weights)")
CONFIG_HELP = "YAML config of the model (may use _BASE_); its weights: --weights, MODEL.WEIGHTS, or those of the run folder it sits in"

# A nested config key as written on the command line: TEST.FLIP, MODEL.BACKBONE.NAME.
_KEY = re.compile(r"[A-Z][A-Z0-9_]*(\.[A-Z][A-Z0-9_]*)+")


def add_model_arguments(parser: argparse.ArgumentParser, device: bool = True,
                        override_example: str = "TEST.FLIP True", many_weights: bool = False) -> None:
    """--run / --weights / --config-file [/ --device] and trailing ``KEY VALUE`` overrides
    (`many_weights`: --weights takes several files, each one model, for tools that compare models).

    Parse with :func:`reid.cli.args.parse_args`, so that flags and overrides may come in any order.
    """
    group = parser.add_argument_group(
        "model (one of: --run DIR | --weights FILE | --config-file FILE [--weights FILE]; "
        "see docs/getting_started.md)")
    group.add_argument("--run", metavar="DIR", help=RUN_HELP)
    if many_weights:
        group.add_argument("--weights", metavar="FILE", nargs="+",
                           help=WEIGHTS_HELP + "; several files are several models (exported .onnx / .pt2 too)")
    else:
        group.add_argument("--weights", metavar="FILE", help=WEIGHTS_HELP)
    group.add_argument("--config-file", metavar="FILE", help=CONFIG_HELP)
    if device:
        group.add_argument("--device", default=None, help="'cpu', 'cuda', 'cuda:N' or 'auto' (default: MODEL.DEVICE)")
    parser.add_argument("opts", nargs="*", metavar="KEY VALUE",
                        help=f"config overrides, e.g. {override_example} (after a one-value option or at the end)")


def check_model_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace,
                          lists: Sequence[str] = (), per_weights: bool = False) -> None:
    """Refuse, with argparse's usage error (no torch imported), what cannot name one model, and
    ``KEY VALUE`` overrides swallowed by a list option such as ``--input a b TEST.FLIP True``.
    `per_weights`: the tool loads each of several ``--weights`` with its own config
    (:func:`resolve_hub_names`)."""
    if args.run and args.config_file:
        parser.error("--run and --config-file both name a config: the run has its own config.yaml "
                     "(change it with KEY VALUE overrides)")
    opts = overrides(args)
    if len(opts) % 2:
        parser.error(f"config overrides come in KEY VALUE pairs; got {len(opts)} words: {' '.join(opts)}")
    for name in lists:
        values = getattr(args, name, None) or []
        keys = [v for v in values if _KEY.fullmatch(v) and not os.path.exists(v)]
        if keys:
            flag = "--" + name.replace("_", "-")
            parser.error(f"{flag} got {keys[0]!r}, which looks like a config override: put KEY VALUE overrides "
                         f"after a one-value option (e.g. --device cpu {keys[0]} ...) or before {flag}")
    if getattr(args, "weights", None):
        from reid.hub.download import DownloadError

        try:
            resolve_hub_names(args, per_weights)
        except (ValueError, DownloadError) as e:  # an unknown name, a download that failed: one line, exit 1
            parser.exit(1, f"error: {' '.join(str(e).split())}\n")


def resolve_hub_names(args: argparse.Namespace, per_weights: bool = False) -> None:
    """Replace catalogue names, ``hf://`` files and published folders in ``args.weights`` with verified
    local files (reid.hub: downloaded once into the cache); without --config-file or --run, the config
    that comes with them is used. ValueError (one line) when that fails.

    With `per_weights` (a tool that loads each of several ``--weights`` on its own: tools/track.py),
    each published model keeps its own config in ``args.weight_configs`` ({file: config}), so models
    of different architectures, and files that store their config, mix in one command; otherwise one
    config serves every model of the command, and a mix that would need several is refused."""
    from reid.export.model_repo import folder_files, published_folder
    from reid.hub import Resolved, looks_like_name, resolve_weights

    many = isinstance(args.weights, list)
    names = [w for w in (args.weights if many else [args.weights]) if looks_like_name(w) or published_folder(w)]
    if not names:
        return
    resolved = {name: resolve_weights(name) for name in names}
    for name, found in list(resolved.items()):  # a published model (tools/publish.py): its weights and config
        if published_folder(found.path):
            files = folder_files(found.path)
            resolved[name] = Resolved(files["weights"], found.entry, files["config"])
    if many:
        args.weights = [resolved[w].path if w in resolved else w for w in args.weights]
    else:
        args.weights = resolved[args.weights].path
    configs = {r.config for r in resolved.values() if r.config}
    if getattr(args, "config_file", None) or getattr(args, "run", None) or not configs:
        return
    if per_weights and many:
        args.weight_configs = {r.path: r.config for r in resolved.values() if r.config}
        return
    if len(configs) > 1:
        raise ValueError(f"--weights {' '.join(names)} need different configs ({', '.join(sorted(configs))}); one "
                         "--config-file serves all the models of a command: name one published model per command.")
    if many and len(args.weights) > len(resolved):
        raise ValueError(f"--weights mixes published models ({' '.join(names)}) with files: their config would be "
                         "applied to the files too; pass --config-file, or name them in separate commands.")
    args.config_file = configs.pop()


def model_config(args: argparse.Namespace, extra_opts: Sequence[Any] = ()) -> Tuple["CfgNode", str]:
    """The inference config and weights file named by :func:`add_model_arguments`' options
    (``reid.inference.loading.resolve_model``); `extra_opts` go after the user's overrides."""
    from reid.inference.loading import resolve_model

    return resolve_model(args.run, args.config_file, args.weights, overrides(args) + list(extra_opts))


def predictor_from_args(args: argparse.Namespace, **kwargs: Any) -> "Predictor":
    """Load the model named by :func:`add_model_arguments`' options."""
    from reid.inference.predictor import load_predictor

    return load_predictor(run=args.run, config_file=args.config_file, weights=args.weights,
                          opts=overrides(args) or None, device=getattr(args, "device", None), **kwargs)


__all__ = ["add_model_arguments", "check_model_arguments", "model_config", "predictor_from_args", "resolve_hub_names"]
