#!/usr/bin/env python
"""The sightings store under load: ingest rate, and search latency with 8 clients while ingest runs.

1. Populate: ``--sightings`` sightings (tracklets of ``--per-tracklet``, ``--dim``-d features drawn
   around ``--people`` identity centres grouped by appearance, as tests/inference/synthetic_features.py
   shapes re-ID features: an image at cosine ~0.7 to its identity; 8 cameras, one small JPEG per
   tracklet) written with
   ``Store.add_tracklets`` in batches (features given, as ``tools/ingest.py --gallery`` writes them),
   without online linking (a store kept with ``--keep`` is reused); then ``--link-last`` more
   sightings with it (max gap 60 s): sightings/s of each.
2. Serve: ``tools/serve.py`` on 127.0.0.1 with ``--search-backend`` (faiss IVF by default, tuned to
   0.95 recall@10); the time until it answers (vectors read from the database, index built) is reported.
3. Load: ``--clients`` threads search by a random stored sighting (k=10, a camera filter on every
   other request) for ``--seconds``, while a second process ingests ``--ingest-rate`` sightings/s
   (batches of 100; 0: as fast as it can);
   p50 / p99 latency over HTTP and the ingest rate during the load.

Everything stays on the loopback interface; the store lives in ``--folder`` (removed unless ``--keep``).

    python benchmarks/bench_store.py --sightings 1000000 --folder /tmp/bench_store
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from reid.store import NewSighting, NewTracklet, Store  # noqa: E402
from tests.inference.synthetic_features import identity_centres  # noqa: E402


class _Done(Exception):
    """The load part finished early (wrk measured it)."""


def tiny_jpeg(seed: int) -> bytes:
    import cv2

    rng = np.random.default_rng(seed)
    return cv2.imencode(".jpg", rng.integers(0, 255, (32, 16, 3), dtype=np.uint8))[1].tobytes()


def make_batch(start: int, count: int, per: int, dim: int, centres: np.ndarray, seed: int,
               prefix: str = "bench") -> List[NewTracklet]:
    """`count` sightings from sighting number `start` on, `per` to a tracklet."""
    rng = np.random.default_rng(seed)
    out = []
    for t0 in range(start, start + count, per):
        person = int(rng.integers(len(centres)))
        tid = t0 // per
        crop = tiny_jpeg(tid % 997)
        n = min(per, start + count - t0)
        # an image around its identity as a trained model's features sit (cos ~0.7 to the centre)
        feats = centres[person] + rng.standard_normal((n, dim)).astype(np.float32) / np.float32(np.sqrt(dim))
        when = 1.8e9 + tid * 2.0
        out.append(NewTracklet(f"{prefix}:{tid}", camera=1 + tid % 8, sightings=[
            NewSighting(f"{prefix}:{tid}:{i}", when + i * 0.2, (0, 0, 16, 32), crop, feats[i], frame=i)
            for i in range(n)]))
    return out


def populate(store: Store, total: int, per: int, dim: int, centres: np.ndarray, batch: int, link: bool,
             offset: int = 0, prefix: str = "bench") -> Dict[str, Any]:
    """Write `total` sightings (numbered from `offset`) in batches; their rate."""
    done, seconds = 0, 0.0
    while done < total:
        n = min(batch, total - done)
        tracklets = make_batch(offset + done, n, per, dim, centres, seed=offset + done, prefix=prefix)
        t = time.perf_counter()
        store.add_tracklets("bench", tracklets, link=link)
        seconds += time.perf_counter() - t
        done += n
        if done % (20 * batch) == 0 or done == total:
            print(f"  {done} sightings, {done / seconds:.0f}/s", flush=True)
    return {"sightings": total, "per_s": total / max(seconds, 1e-9), "linked": link}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ingest_loop(folder: str, stop_file: str, report: str, start: int, per: int, dim: int, people: int,
                batch: int, rate: float) -> None:
    """A second process: batches at `rate` sightings/s (0: as fast as it can) until `stop_file` exists;
    writes what it did to `report`."""
    store = Store(folder)
    centres = identity_centres(people, dim, np.random.default_rng(0))
    done, t0 = 0, time.perf_counter()
    while not os.path.exists(stop_file):
        store.add_tracklets("bench", make_batch(start + done, batch, per, dim, centres, seed=start + done,
                                                prefix="load"), link=False)
        done += batch
        if rate > 0:  # hold the rate: sleep until this batch's due time
            time.sleep(max(0.0, t0 + done / rate - time.perf_counter()))
    with open(report, "w") as f:
        json.dump({"sightings": done, "seconds": time.perf_counter() - t0}, f)


WRK_SCRIPT = """
math.randomseed(%(seed)d)
local n = 0
request = function()
  n = n + 1
  local cams = (n %% 2 == 0) and "&cameras=1,2,3,4" or ""
  return wrk.format("GET", "/api/search/sighting/" .. math.random(1, %(rows)d) .. "?k=10" .. cams, {["Authorization"] = "Bearer %(token)s"})
end
"""


def _ms(text: str) -> float:
    """wrk's latency figure ("812.00us", "57.31ms", "1.02s") in ms."""
    for unit, scale in (("us", 1e-3), ("ms", 1.0), ("s", 1e3)):
        if text.endswith(unit):
            return float(text[:-len(unit)]) * scale
    return float(text)


def run_wrk(url: str, token: str, rows: int, clients: int, seconds: float, folder: str) -> Dict[str, Any]:
    """Debian's wrk (C, little CPU of its own) with `clients` connections on 2 threads, random sightings,
    every other request with a camera filter; its latency percentiles and rate."""
    script = os.path.join(folder, "search.lua")
    with open(script, "w") as f:
        f.write(WRK_SCRIPT % {"seed": 1, "rows": rows, "token": token})
    out = subprocess.run(["wrk", "-t2", f"-c{clients}", f"-d{int(seconds)}s", "--latency", "-s", script, url],
                         capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    pct = {ln.split()[0]: _ms(ln.split()[1]) for ln in lines if ln.strip().startswith(("50%", "75%", "90%", "99%"))}
    rate = next(float(ln.split()[1]) for ln in lines if ln.startswith("Requests/sec"))
    errors = sum(int(x) for ln in lines if "Non-2xx" in ln for x in ln.split()[-1:])
    return {"client": "wrk", "p50_ms": pct["50%"], "p90_ms": pct["90%"], "p99_ms": pct["99%"],
            "requests_per_s": rate, "errors": errors}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sightings", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--per-tracklet", type=int, default=8)
    p.add_argument("--people", type=int, default=50000, help="identities (about 20 sightings each at 1M)")
    p.add_argument("--batch", type=int, default=2000, help="sightings per transaction")
    p.add_argument("--link-last", type=int, default=20000,
                   help="sightings then ingested with online linking (max gap 60 s), on top of the store")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--ingest-rate", type=float, default=1000.0,
                   help="sightings/s the second process ingests during the load (0: as fast as it can)")
    p.add_argument("--client", choices=("python", "wrk"), default="python",
                   help="the clients: Python threads with httpx, or Debian's wrk (less CPU of its own)")
    p.add_argument("--search-backend", default="ivf", choices=("exact", "faiss", "ivf", "hnsw"))
    p.add_argument("--folder", default="/tmp/bench_store")
    p.add_argument("--keep", action="store_true", help="keep the store (a second run reuses it)")
    p.add_argument("--output", default=None, help="JSON file for the figures")
    p.add_argument("--ingest-child", nargs=2, metavar=("STOP_FILE", "REPORT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.ingest_child:
        ingest_loop(args.folder, args.ingest_child[0], args.ingest_child[1], args.sightings * 2, args.per_tracklet,
                    args.dim, args.people, 100, args.ingest_rate)
        return 0
    import httpx

    figures: Dict[str, Any] = {"sightings": args.sightings, "dim": args.dim, "clients": args.clients,
                               "search_backend": args.search_backend}
    fresh = not os.path.exists(os.path.join(args.folder, "store.db"))
    store = Store(args.folder)
    store.register_model("bench", {"weights_sha256": "bench"}, args.dim, threshold=0.5)
    centres = identity_centres(args.people, args.dim, np.random.default_rng(0))
    if fresh:
        print(f"populating {args.sightings} sightings (no linking) ...", flush=True)
        figures["populate"] = populate(store, args.sightings, args.per_tracklet, args.dim, centres, args.batch, False)
    if args.link_last:
        from reid.store.online_linking import LinkRules

        print(f"{args.link_last} more sightings, linked online ...", flush=True)
        store.rules = LinkRules(max_gap=60.0)
        figures["ingest_linked"] = populate(store, args.link_last, args.per_tracklet, args.dim, centres, args.batch,
                                            True, offset=args.sightings, prefix=f"linked{time.time_ns()}")
    counts = store.counts()
    store.close()
    from reid.service.tokens import store_tokens

    tokens = store_tokens(args.folder)
    token = tokens.add(f"bench-{time.time_ns()}", "read")
    port = free_port()
    t = time.perf_counter()
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "tools", "serve.py"), "--store", args.folder,
                               "--port", str(port), "--search-backend", args.search_backend],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"}
    stop_file = os.path.join(args.folder, "stop-ingest")
    report = os.path.join(args.folder, "ingest-report.json")
    child = None
    try:
        while True:
            if server.poll() is not None:
                raise SystemExit(f"the server stopped: {server.stdout.read()[-2000:]}")
            try:
                if httpx.get(url + "/api/health", headers=headers, timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        figures["server_ready_s"] = time.perf_counter() - t
        health = httpx.get(url + "/api/health", headers=headers, timeout=30).json()
        figures["vectors"] = health["vectors"]
        print(f"server ready after {figures['server_ready_s']:.1f} s: {health['vectors']}", flush=True)
        n_sightings = counts["sightings"]
        if os.path.exists(stop_file):
            os.remove(stop_file)
        child = subprocess.Popen([sys.executable, __file__, "--folder", args.folder, "--sightings",
                                  str(args.sightings), "--dim", str(args.dim), "--per-tracklet",
                                  str(args.per_tracklet), "--people", str(args.people), "--ingest-rate",
                                  str(args.ingest_rate), "--ingest-child", stop_file,
                                  report])
        if args.client == "wrk":
            figures["search"] = run_wrk(url, token, n_sightings, args.clients, args.seconds, args.folder)
            open(stop_file, "w").close()
            child.wait(timeout=120)
            with open(report) as f:
                ingest = json.load(f)
            figures["ingest_during_load_per_s"] = ingest["sightings"] / ingest["seconds"]
            raise _Done
        latencies: List[List[float]] = [[] for _ in range(args.clients)]
        errors: List[str] = []
        deadline = time.perf_counter() + args.seconds

        def client(k: int) -> None:
            rng = np.random.default_rng(k)
            with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
                n = 0
                while time.perf_counter() < deadline:
                    sid = int(rng.integers(1, n_sightings + 1))
                    params = {"k": 10} if n % 2 else {"k": 10, "cameras": "1,2,3,4"}
                    t0 = time.perf_counter()
                    r = c.get(f"/api/search/sighting/{sid}", params=params)
                    latencies[k].append(time.perf_counter() - t0)
                    if r.status_code != 200:
                        errors.append(f"{r.status_code} {r.text[:200]}")
                    n += 1

        threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        open(stop_file, "w").close()
        child.wait(timeout=120)
        with open(report) as f:
            ingest = json.load(f)
        ms = np.concatenate([np.array(x) for x in latencies]) * 1000
        figures["search"] = {"requests": int(len(ms)), "p50_ms": float(np.percentile(ms, 50)),
                             "p99_ms": float(np.percentile(ms, 99)), "mean_ms": float(ms.mean()),
                             "requests_per_s": len(ms) / args.seconds, "errors": len(errors)}
        figures["ingest_during_load_per_s"] = ingest["sightings"] / ingest["seconds"]
        if errors:
            print("errors:", errors[:3])
    except _Done:
        pass
    finally:
        if server.poll() is None:  # SIGTERM: the server saves its vectors (a next run with --keep loads them)
            server.terminate()
            try:
                server.wait(timeout=300)
            except subprocess.TimeoutExpired:
                pass
        for proc in (child, server):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        if not args.keep:
            shutil.rmtree(args.folder, ignore_errors=True)
    print(json.dumps(figures, indent=1))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(figures, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
