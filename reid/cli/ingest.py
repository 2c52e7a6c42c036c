"""Ingest what the other tools write into a store of sightings, under a named model.

One input per run:
  --tracks DIR|gt   tools/track.py's <output>/<model>/ or tools/link_cameras.py's <output>/tracks/ (one
                    <sequence name>.txt per sequence), or gt (each sequence's ground truth), with the
                    sequences (--sequences DIR) or the videos (--video FILE ...) they came from: one
                    tracklet per sequence and track id, up to --crops-per-tracklet crops spread over its
                    time; a sighting's time is --start-time + (frame - 1) / frame rate;
  --crops DIR       image files whose names carry camera and time (c<camera>_<time>_<anything>.jpg, the
                    time in seconds since 1970 or as 20261128T140501.250Z; or --name-pattern REGEX with the
                    groups camera and time): one tracklet per image;
  --gallery FILE    a gallery of tools/extract.py with cameras (camids): its features as they are (no
                    model runs), times from the image names when --name-pattern fits them, else --start-time.

Tracks and crops are embedded with the model (--run / --weights / --config-file), registered as
--model-name (default: the model's name) with its weights' identity and its threshold: --threshold S,
else the one calibrated at --far (thresholds.json of the run, or the exported file's); without one,
tracklets are stored but not linked until a threshold is recorded. A model the store already holds
keeps its recorded threshold (e.g. one tools/serve.py --calibrate set from reviewed identities) unless
--threshold or --far is given. A gallery's model is --model-name with the gallery's record of its
weights.

New tracklets are linked online to the store's identities; --max-gap and --transitions add the time and
camera-pair limits of tools/link_cameras.py (for this run's new tracklets: they are not recorded in the
store, so give them on every run).

Each batch of --batch-size tracklets is one transaction: stopped at any point (Ctrl-C, SIGTERM, even
kill -9), the store keeps every batch written before, whole, and nothing of the rest. The same command
run again skips what is stored (without reading its crops or running the model) and writes the rest;
a second model over the same input adds its features to the stored sightings. Videos are decoded once
into <store>/videos/. See docs/service.md.

Examples:
    python tools/ingest.py --store output/store --tracks gt --sequences datasets/synth_mot --run output/demo
    python tools/ingest.py --store output/store --tracks output/links/tracks --sequences datasets/synth_mot \\
        --run output/demo --start-time 2026-11-28T14:00:00Z
    python tools/ingest.py --store output/store --crops crops/ --weights model.onnx --model-name osnet-onnx
    python tools/ingest.py --store output/store --gallery gallery.npz --model-name demo \\
        --database postgresql+psycopg://reid@127.0.0.1:5432/reid
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Any, List, Optional

from .args import float_in, int_in, overrides, parse_args, tool_parser
from .interrupts import run_stoppable
from .model_args import add_model_arguments, check_model_arguments
from .sequence_args import add_convention_argument, add_input_arguments

DEFAULT_FAR = 1e-2  # reid.store.ingest.DEFAULT_FAR (not imported: --help loads no numpy)
DEFAULT_BATCH = 200  # reid.store.ingest.DEFAULT_BATCH (not imported: --help loads no numpy)


def _time(text: str) -> float:
    from reid.store.times import parse_time  # standard library only

    try:
        return parse_time(text, "--start-time")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(__doc__)
    p.add_argument("--store", required=True, metavar="DIR", help="the store's folder (made when new)")
    p.add_argument("--database", metavar="URL", default=None,
                   help="the store's database (default: SQLite in the folder); e.g. "
                        "postgresql+psycopg://reid@127.0.0.1:5432/reid")
    p.add_argument("--model-name", metavar="NAME", default=None,
                   help="the name the store keeps the features under (default: the model's name, e.g. the run "
                        "folder's; required with --gallery)")
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--tracks", metavar="DIR", help="a folder of <sequence name>.txt results of tools/track.py or "
                                                       "tools/link_cameras.py, or 'gt' (each sequence's ground truth)")
    given.add_argument("--crops", metavar="DIR", help="a folder of crops named c<camera>_<time>_<anything>.jpg")
    given.add_argument("--gallery", metavar="FILE", help="a gallery of tools/extract.py (.npz / .safetensors) with "
                                                         "cameras")
    add_input_arguments(p, "with --tracks: the MOTChallenge sequences the tracks are of", required=False,
                        decoded_into="<store>")
    p.add_argument("--start-time", type=_time, default=0.0, metavar="TIME",
                   help="with --tracks: the time of frame 1, seconds since 1970 or ISO-8601 (2026-11-28T14:00:00Z; "
                        "no zone: UTC); with --gallery: the time of images whose names give none (default: 0, 1970)")
    p.add_argument("--crops-per-tracklet", type=int_in(1, 1000), default=8, metavar="N",
                   help="with --tracks: sightings per tracklet, spread over its time (default: 8)")
    p.add_argument("--name-pattern", metavar="REGEX", default=None,
                   help="a regular expression with the named groups camera and time, searched in each image's "
                        "file name (default: c<camera>_<time>[_<anything>].<ext>)")
    p.add_argument("--source-name", metavar="NAME", default=None,
                   help="what keeps this input's keys apart from another's with the same names (default: the "
                        "results folder with its parent, the crop folder's or the gallery file's name); keep it "
                        "the same when running again")
    decide = p.add_mutually_exclusive_group()
    decide.add_argument("--threshold", type=float_in(-1, 1, "a cosine similarity"), default=None, metavar="S",
                        help="record S (a cosine similarity) as the model's linking threshold")
    decide.add_argument("--far", type=float_in(0, 1, "a false accept rate", open_low=True, open_high=True),
                        default=None, metavar="F",
                        help="record the model's threshold calibrated at false accept rate F (thresholds.json of "
                             f"the run, or the exported file's; default: {DEFAULT_FAR:g})")
    p.add_argument("--no-link", action="store_true", help="store the new tracklets without linking them")
    p.add_argument("--max-gap", type=float_in(0, None, "a number of seconds"), default=None, metavar="SECONDS",
                   help="a new tracklet does not join an identity with a tracklet of another camera further apart in "
                        "time (default: no limit)")
    p.add_argument("--transitions", metavar="FILE", default=None,
                   help='JSON of the camera pairs people walk between: {"transitions": [{"cameras": [1, 2], '
                        '"min_seconds": 0, "max_seconds": 60}]}; pairs not listed are not linked (with --tracks, '
                        'checked against the sequences\' cameras)')
    p.add_argument("--batch-size", type=int_in(1, 100000), default=DEFAULT_BATCH, metavar="N",
                   help=f"tracklets per transaction (default: {DEFAULT_BATCH})")
    p.add_argument("--quiet", action="store_true", help="no progress bar or notes; only the final line")
    add_model_arguments(p)
    add_convention_argument(p)
    return p


#: What a database says when another writer holds it (SQLite; PostgreSQL's lock timeout, deadlock,
#: serialization failure), lower case.
_BUSY = ("database is locked", "database table is locked", "lock timeout", "lock not available", "deadlock",
         "could not serialize")


def _holds_sightings(store: Any) -> bool:
    """Whether the store holds sightings (True when that cannot be read: then nothing is removed)."""
    try:
        return bool(store.counts()["sightings"])
    except Exception:  # noqa: BLE001 - the error being reported is the one that stopped the ingest
        return True


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors (before anything is imported or opened)."""
    check_model_arguments(parser, args, lists=("video",))
    named = bool(args.run or args.weights or args.config_file)
    if args.tracks and not (args.sequences or args.video):
        parser.error("--tracks needs the sequences they are of: --sequences DIR or --video FILE ...")
    if not args.tracks and (args.sequences or args.video):
        parser.error("--sequences / --video go with --tracks; --crops and --gallery hold their images")
    if args.tracks and args.name_pattern:
        parser.error("--name-pattern reads image names: it goes with --crops or --gallery")
    if args.gallery:
        if named or args.far is not None:
            parser.error("--gallery holds its features: leave --run / --weights / --config-file and --far out "
                         "(--threshold S records a threshold)")
        if not args.model_name:
            parser.error("--gallery needs --model-name: the name the store keeps its features under")
    elif not named:
        parser.error("name the model that embeds the crops: --run DIR, --weights FILE or --config-file FILE")


class _Bar:
    """A tqdm bar over the input's tracklets, made on the first report (when the total is known)."""

    def __init__(self, quiet: bool, kind: str) -> None:
        self.quiet, self.kind, self.bar = quiet, kind, None

    def __call__(self, done: int, total: int) -> None:
        if self.quiet:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=f"ingest {self.kind}", unit="tracklet", file=sys.stderr,
                            dynamic_ncols=True)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _track_source(args: argparse.Namespace, store: Any, log: Any, transitions: Any) -> Any:
    from reid.store.ingest_tracks import TrackSource, default_track_name
    from reid.tracking.cross_camera import GT_TRACKS, read_camera_tracks
    from reid.tracking.sequences import find_sequences
    from reid.tracking.videos import find_videos, video_sequences

    gt = args.tracks == GT_TRACKS
    if args.video:
        # as tools/track.py: every video checked first, then decoded (once; <store>/videos/ keeps them)
        videos = find_videos(args.video, need="gt" if gt else None)
        if transitions is not None:  # the videos are cameras 1, 2, ... (reid/tracking/videos.py): before decoding
            transitions.check_cameras(range(1, len(videos) + 1), args.transitions)
        sequences = video_sequences(videos, store.folder, log)
    else:
        sequences = find_sequences(args.sequences)
        if transitions is not None:
            transitions.check_cameras([seq.camera for seq in sequences], args.transitions)
    rows = read_camera_tracks(sequences, args.tracks)
    # gt's default name: the folder of the sequences, or of the (first) videos
    first = args.video[0] if args.video else ""
    where = args.sequences or (first if os.path.isdir(first) else os.path.dirname(os.path.abspath(first)))
    name = args.source_name or default_track_name(args.tracks, where)
    return TrackSource(sequences, rows, None, name, args.start_time, args.crops_per_tracklet)


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    _check(parser, args)

    def work() -> None:
        from sqlalchemy.exc import IntegrityError, OperationalError

        try:
            ingest_input()
        except (IntegrityError, OperationalError) as e:
            # two runs over one input: the other took a source key this batch meant to write, or holds the
            # database past the wait; the batch was rolled back whole and a re-run skips what either stored.
            # Other OperationalErrors (a server that is down, a broken file) are not that: shown as they are.
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if isinstance(e, OperationalError) and not any(w in first.lower() for w in _BUSY):
                raise
            raise ValueError(f"another process wrote these tracklets (or holds the database) meanwhile: "
                             f"{first[:300]}; run the same command again: it skips what is stored.") from None

    def ingest_input() -> None:
        from reid.store.ingest import ingest, recorded_threshold, register_appearance_model
        from reid.store.ingest_images import CropFolderSource, GallerySource
        from reid.store.online_linking import LinkRules
        from reid.store.store import Store
        from reid.tracking.linking import load_transitions

        log = (lambda _: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
        # read (a bad file: one line) before the store opens; crops' and galleries' cameras are the user's
        # numbers, not known here: only --tracks checks the file's cameras against its sequences'
        transitions = load_transitions(args.transitions) if args.transitions else None
        made = not os.path.exists(args.store)  # a folder this run makes goes again if it stores nothing
        store = Store(args.store, args.database, rules=LinkRules(max_gap=args.max_gap, transitions=transitions))
        bar, stored = None, False
        try:
            # the input is read and checked whole before the model loads: a bad name or file costs nothing
            if args.gallery:
                from reid.search import load_gallery

                gallery = load_gallery(args.gallery)
                source = GallerySource(gallery, args.gallery, args.source_name, args.name_pattern, args.start_time)
            elif args.crops:
                source = CropFolderSource(args.crops, None, args.source_name, args.name_pattern)
            else:
                source = _track_source(args, store, log, transitions)
            source.planned()
            if args.gallery:
                before = recorded_threshold(store, args.model_name)  # shown when --threshold replaces it
                given = "given (--threshold)" if args.threshold is not None else ""
                info = store.register_model(args.model_name, gallery.meta, gallery.dim, threshold=args.threshold,
                                            threshold_source=given)
                replaced = args.threshold is not None
            else:
                from reid.tracking.appearance import load_appearance_models

                model = load_appearance_models(weights=[args.weights] if args.weights else [], run=args.run,
                                               config_file=args.config_file, opts=overrides(args) or None,
                                               device=args.device, input_convention=args.input_convention)[0]
                source.model = model
                name = args.model_name or model.label
                before = recorded_threshold(store, name)  # shown when --threshold / --far replaces it
                # without --threshold / --far a recorded threshold is kept (module docstring)
                info, why = register_appearance_model(store, name, model, args.far, args.threshold)
                # recorded what was asked for: the store's source is then `why` (else `why` says what is missing)
                replaced = (args.threshold is not None or args.far is not None) and info.threshold_source == why
                if info.threshold is None:
                    log(f"note: no linking threshold for model {info.name!r} ({why.rstrip('.')}); tracklets are "
                        "stored, not linked, until one is recorded (--threshold S)")
                elif args.far is not None and not replaced:
                    log(f"note: model {info.name!r} keeps its recorded threshold ({why.rstrip('.')})")
            if replaced and before is not None:
                log(f"model {info.name!r}: threshold {before[0]:.4f} -> {info.threshold:.4f} "
                    f"({info.threshold_source})")
            elif info.threshold is not None:
                log(f"model {info.name!r}: linking threshold cosine similarity {info.threshold:.4f} "
                    f"({info.threshold_source})")
            bar = _Bar(args.quiet, source.kind)
            count = ingest(store, info.name, source, args.batch_size, progress=bar, link=not args.no_link)
            stored = True
        finally:
            if bar is not None:
                bar.close()
            empty = made and not stored and not _holds_sightings(store)
            store.close()
            if empty:  # bad input found before anything was written: no empty store left behind
                shutil.rmtree(args.store, ignore_errors=True)
        print(f"ingested {count.tracklets} tracklets ({count.sightings} sightings, {count.features} features) "
              f"under model {info.name!r}; skipped {count.skipped_tracklets} already stored; linked {count.linked} "
              "to an existing identity")
        if count.changed_tracklets:
            print(f"warning: {count.changed_tracklets} of the tracklets skipped are stored under the same keys with "
                  f"another start time (e.g. {count.changed_example[:200]!r}): another input with the same names, not "
                  "this one again; the stored ones are kept. Give this input its own --source-name to add it, or "
                  "ingest it into a new store.", file=sys.stderr)

    left = (f"the store {args.store} keeps every batch written before the stop, each whole; run the same command "
            "again to ingest the rest (what is stored is skipped).")
    return run_stoppable(work, left)


if __name__ == "__main__":
    sys.exit(main())
