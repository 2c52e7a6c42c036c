"""Train and test once per published split of a video dataset (iLIDS-VID, PRID2011: 10 each), and report
the mean and standard deviation over the splits, as those benchmarks are reported.

Each split is a run of tools/train.py in <output>/split_<k> with DATASETS.VIDEO.SPLIT_ID k (its own
people for training and testing), tested by tools/test.py into <output>/split_<k>/test. A rerun of the
same command continues a stopped split (--resume) and tests finished ones again; a different config or
overrides in the same --output are refused in one line (splits of two settings would be averaged).
Writes <output>/splits.json (every split's figures, their means and standard deviations) and prints the
table.

Examples:
    python tools/train_splits.py --config-file configs/Video/ilidsvid_resnet50.yml --output output/ilidsvid
    python tools/train_splits.py --config-file configs/Video/prid2011_resnet50.yml --output output/prid \\
        --splits 0 1 2 DATASETS.ROOT /data
"""
from __future__ import annotations

import json
import os
import sys
from typing import Dict, List, Optional, Sequence, Union

from .args import int_in, overrides, parse_args, tool_parser
from .errors import run_main

#: The file recording the settings of an --output folder.
SETTINGS = "splits_settings.json"


def _check_dataset(cfg) -> str:
    """The one video dataset with published splits that the config trains and tests on."""
    from reid.data.build import is_video_dataset

    names = [str(n).lower() for n in cfg.DATASETS.NAMES]
    tests = [str(n).lower() for n in cfg.DATASETS.TESTS]
    if len(names) != 1 or tests != names or not is_video_dataset(names[0]) or names[0] not in ("ilidsvid", "prid2011"):
        raise ValueError(f"DATASETS.NAMES {list(cfg.DATASETS.NAMES)} and DATASETS.TESTS {list(cfg.DATASETS.TESTS)}: "
                         "train_splits trains and tests on one dataset with published splits, ilidsvid or "
                         "prid2011, named in both.")
    return names[0]


def _claim(output: str, settings: Dict) -> None:
    """Record `settings` in `output`, or refuse a folder holding other settings or another tool's files."""
    path = os.path.join(output, SETTINGS)
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                recorded = json.load(f)
            if not isinstance(recorded, dict):
                raise ValueError("not a JSON object")
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"{path} cannot be read ({type(e).__name__}: {str(e).splitlines()[0][:200]}): this tool "
                             "wrote it, so it was changed by hand; restore it or use another --output.") from None
        for key in settings:
            if recorded.get(key) != settings[key]:
                raise ValueError(f"{output} holds the splits of other settings ({key}: {recorded.get(key)!r} there, "
                                 f"{settings[key]!r} now); use another --output.")
        return
    if os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        raise ValueError(f"--output {output} exists and is not an empty folder of this tool's; give a new folder.")
    from reid.utils.file_io import atomic_write_text

    os.makedirs(output, exist_ok=True)
    atomic_write_text(path, json.dumps(settings, indent=1))


def run_splits(config_file: str, output: str, splits: Optional[Sequence[int]], opts: List[str]) -> Union[Dict, int]:
    """Train and test every split (see the module docstring); returns splits.json's content, or the exit code
    of a split that failed (its tool said why)."""
    from reid.config import load_config
    from reid.data.build import dataset_kwargs
    from reid.data.video import build_video_dataset
    from reid.evaluation.gallery_draws import mean_and_std
    from reid.evaluation.evaluator import format_draws, EvalResult
    from reid.utils.file_io import atomic_write_text

    from . import test as cli_test
    from . import train as cli_train

    cfg = load_config(config_file, opts)
    name = _check_dataset(cfg)
    available = build_video_dataset(name, cfg.DATASETS.ROOT, **dataset_kwargs(cfg, name)).num_splits
    chosen = list(range(available)) if not splits else sorted(set(int(k) for k in splits))
    bad = [k for k in chosen if not 0 <= k < available]
    if bad:
        raise ValueError(f"--splits {bad[0]}: {name} has {available} splits; use split indices in 0..{available - 1}.")
    _claim(output, {"config_file": os.path.abspath(config_file), "opts": list(opts)})
    per_split = []
    for k in chosen:
        run = os.path.join(output, f"split_{k}")
        print(f"split {k}: training in {run}", flush=True)
        rc = cli_train.main(["--config-file", config_file, "--resume", *opts, "DATASETS.VIDEO.SPLIT_ID", str(k),
                             "OUTPUT_DIR", run])
        if rc != 0:
            return rc  # training said why; a rerun continues from its last checkpoint
        tested = os.path.join(run, "test")
        if cli_test.main(["--run", run, "--output-dir", tested]) != 0:
            return 1
        with open(os.path.join(tested, "metrics.json"), encoding="utf-8") as f:
            row = json.load(f)["results"][name]["plain"]
        per_split.append({key: float(row[key]) for key in ("R-1", "R-5", "R-10", "mAP", "mINP")})
    mean, std = mean_and_std(per_split)
    report = {"dataset": name, "splits": chosen, "per_split": per_split, "mean": mean, "std": std}
    atomic_write_text(os.path.join(output, "splits.json"), json.dumps(report, indent=1))
    table = EvalResult({"plain": mean}, None, None, draws={"num_draws": len(chosen), "std": {"plain": std}})
    print(format_draws(table, title=f"{name}: mean +- std over splits {', '.join(map(str, chosen))}"))
    print(f"wrote {os.path.join(output, 'splits.json')}")
    return report


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = tool_parser(__doc__)
    parser.add_argument("--config-file", required=True, metavar="FILE", help="the training config of every split")
    parser.add_argument("--output", required=True, metavar="DIR", help="folder for split_<k>/ runs and splits.json")
    parser.add_argument("--splits", nargs="+", type=int_in(0, 99), metavar="K",
                        help="only these split indices (default: every published split)")
    parser.add_argument("opts", nargs="*", metavar="KEY VALUE", help="config overrides for every split (not "
                        "DATASETS.VIDEO.SPLIT_ID or OUTPUT_DIR: the tool sets them)")
    args = parse_args(parser, argv)
    opts = overrides(args)
    taken = {"DATASETS.VIDEO.SPLIT_ID", "OUTPUT_DIR"} & set(opts[::2])
    if taken:
        parser.error(f"{', '.join(sorted(taken))}: set by the tool for each split; leave it out")
    return run_main(lambda: run_splits(args.config_file, args.output, args.splits, opts))


if __name__ == "__main__":
    sys.exit(main())
