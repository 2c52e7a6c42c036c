"""Serve a store: the HTTP API (OpenAPI docs at /docs) and the review page, on 127.0.0.1 unless told.

Every /api route needs a token. On first start a review token named "admin" is made and printed
once (only its hash is kept, in <store>/tokens.json); --new-token NAME:ROLE makes another (role
read or review) and exits. With a model (--run / --weights / --config-file), the page and the API
search by an uploaded image; without one, by a stored sighting only. See docs/service.md.

Examples:
    python tools/ingest.py --store output/store --tracks gt --sequences datasets/synth_mot --run output/demo
    python tools/serve.py --store output/store --run output/demo
    python tools/serve.py --store output/store --new-token alice:review
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from .args import float_in, int_in, overrides, parse_args, tool_parser
from .errors import run_main
from .model_args import add_model_arguments, check_model_arguments

#: The host the server binds to unless --host says otherwise: this machine only.
DEFAULT_HOST = "127.0.0.1"
#: Host names of this machine's loopback interface (also what a loopback server answers to).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
SEARCH_BACKENDS = ("exact", "faiss", "ivf", "hnsw")


class _Stopped(Exception):
    """SIGTERM or SIGINT after uvicorn's graceful shutdown (it raises the signal again once it is done)."""


@contextmanager
def _stop_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGINT into :class:`_Stopped` while serving: uvicorn answers the requests under
    way, then raises the signal again; SIGTERM's default would end the process there, before the
    vectors are saved (a restart would then read a million rows from the database again)."""
    def stop(signum: int, _frame: Any) -> None:
        raise _Stopped(signal.Signals(signum).name)

    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _token_spec(text: str):
    name, sep, role = text.rpartition(":")
    if not sep or not name or role not in ("read", "review"):
        raise argparse.ArgumentTypeError(f"{text!r} must be NAME:ROLE with ROLE read or review, e.g. alice:review")
    return name, role


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(__doc__)
    p.add_argument("--store", required=True, metavar="DIR", help="the store's folder (crops, vectors, tokens)")
    p.add_argument("--database", metavar="URL", default=None,
                   help="the store's database (default: SQLite in the folder); e.g. postgresql+psycopg://reid@127.0.0.1/reid")
    p.add_argument("--model-name", metavar="NAME", default=None,
                   help="the store's model the server searches with (default: the only one)")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to bind (default {DEFAULT_HOST}: this machine only; 0.0.0.0 opens it to the network)")
    p.add_argument("--port", type=int_in(1, 65535), default=8000, help="port (default 8000)")
    p.add_argument("--search-backend", choices=SEARCH_BACKENDS, default="exact",
                   help="vector index: exact, or faiss's flat / IVF / HNSW tuned to 0.95 recall (default exact)")
    p.add_argument("--new-token", type=_token_spec, metavar="NAME:ROLE",
                   help="make a token (role read or review), print it once, and exit")
    p.add_argument("--export", metavar="DIR",
                   help="write the reviewed identities as a Market-1501 folder with list files (docs/service.md) and exit")
    p.add_argument("--calibrate", type=float_in(0, 1, "a false accept rate", open_low=True, open_high=True),
                   metavar="FAR", help="calibrate the model's threshold at false accept rate FAR on the reviewed "
                                       "identities, record it for search and linking, and exit")
    add_model_arguments(p)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    check_model_arguments(parser, args)

    def work() -> None:
        from reid.service.tokens import store_tokens

        tokens = store_tokens(args.store)
        if args.new_token:
            token = tokens.add(*args.new_token)
            print(f"token for {args.new_token[0]} ({args.new_token[1]}), shown once: {token}")
            return
        import uvicorn

        from reid.service.app import create_app
        from reid.store.export import calibrate_reviewed, export_reviewed
        from reid.store.store import MODELS_SECONDS, STORE_FILE, Store

        if args.export is not None or args.calibrate is not None:
            # export / calibrate read a store: a folder that holds none is a mistake, not a new store to make
            if not os.path.isfile(os.path.join(args.store, STORE_FILE)):
                raise ValueError(f"store folder {args.store} holds no store (no {STORE_FILE}); give the folder "
                                 "tools/ingest.py wrote.")
            store = Store(args.store, args.database, backend=args.search_backend)
            try:
                if args.calibrate is not None:  # the model named before anything is written
                    model = store.model(args.model_name)
                if args.export is not None:
                    record = export_reviewed(store, args.export)
                    print(f"exported {record['identities']} reviewed identities ({record['test_identities']} for "
                          f"testing; images {record['images']}) to {args.export}")
                if args.calibrate is not None:
                    record = calibrate_reviewed(store, model.name, args.calibrate)
                    entry = record["thresholds"][f"{args.calibrate:g}"]
                    threshold = store.model(model.name).threshold
                    print(f"model {model.name!r}: threshold cosine similarity {threshold:.4f} at FAR "
                          f"{args.calibrate:g} (TAR {entry['tar']:.3f}), recorded for search and linking")
            finally:
                store.close()
            return
        store = Store(args.store, args.database, backend=args.search_backend, models_seconds=MODELS_SECONDS,
                      background_index=True)
        embed, name = None, args.model_name
        if args.run or args.weights or args.config_file:
            from reid.tracking.appearance import load_appearance_models

            model = load_appearance_models(weights=[args.weights] if args.weights else [], run=args.run,
                                           config_file=args.config_file, opts=overrides(args) or None,
                                           device=args.device)[0]
            served = store.model(name)
            if model.feature_dim != served.dim:
                raise ValueError(f"the model gives {model.feature_dim}-d features; the store's model {served.name!r} "
                                 f"has {served.dim}-d: give the model it was ingested with.")
            embed, name = model.embed, served.name
        if not len(tokens):
            token = tokens.add("admin", "review")
            print(f"first start: review token for 'admin', shown once (only its hash is kept in {tokens.path}):\n"
                  f"  {token}")
        for m in store.models():
            store.vectors(m)  # loaded (or rebuilt) before the first request
        loopback = args.host in LOOPBACK_HOSTS
        if not loopback:
            print(f"warning: serving on {args.host}: anyone who can reach this machine can try tokens; use a "
                  "TLS-terminating proxy in front of it on an untrusted network", file=sys.stderr)
        print(f"serving {args.store} on http://{args.host}:{args.port}/ (API docs at /docs)", flush=True)
        stopped = "the server stopped"
        try:
            # on the loopback, only requests naming the loopback are answered (DNS rebinding: a page elsewhere
            # resolving its own name to 127.0.0.1 would otherwise reach the server)
            app = create_app(store, tokens, embed=embed, model_name=name,
                             allowed_hosts=LOOPBACK_HOSTS if loopback else None)
            with _stop_signals():
                uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
        except _Stopped as e:
            stopped = f"stopped by {e}"
        finally:
            saved = store.save_vectors()
            store.close()
        print(f"{stopped}; vectors saved ({len(saved)} model(s), a restart loads them)" if saved else stopped,
              flush=True)

    return run_main(work)


if __name__ == "__main__":
    sys.exit(main())
