"""index.html and a CSV listing every drawn query with its AP and its top-K file names.

The HTML lets a user scroll through many queries in a browser; the CSV (one line per shown
gallery entry) lets them filter and count in a spreadsheet. File names come from datasets
and user lists, so everything placed in HTML is escaped.
"""
from __future__ import annotations

import csv
import html
import io
import os
from typing import List
from urllib.parse import quote

import numpy as np

from reid.utils.file_io import atomic_write_text

from .items import Items
from .results import RankedVisualization

CSV_NAME = "ranked_results.csv"
HTML_NAME = "index.html"
CSV_COLUMNS = [
    "number", "query_index", "query_path", "query_pid", "query_camid", "order", "AP", "rank",
    "gallery_index", "gallery_path", "gallery_pid", "gallery_camid", "distance", "match", "ignored",
    "image_file",
]


def _ap_text(ap: float) -> str:
    return "n/a" if np.isnan(ap) else f"{100.0 * ap:.2f}%"


def write_csv(result: RankedVisualization, query: Items, gallery: Items) -> str:
    """Write ``ranked_results.csv`` (one line per shown gallery entry) and return its path.

    `AP` is a fraction in [0, 1] (empty when unknown); `rank` is 0 for entries the metric ignores.
    """
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for pic in result.pictures:
        qi = pic.query_index
        for row in pic.rows:
            r = row.ranked
            for gi, rank, dist, match, ign in zip(r.gallery_index, r.rank, r.distance, r.match, r.ignored):
                writer.writerow([
                    pic.number, qi, query.paths[qi], int(query.pids[qi]), int(query.camids[qi]), row.label,
                    "" if np.isnan(row.ap) else f"{row.ap:.6f}", int(rank), int(gi), gallery.paths[gi],
                    int(gallery.pids[gi]), int(gallery.camids[gi]), f"{float(dist):.6f}", int(bool(match)),
                    int(bool(ign)), pic.image_file,
                ])
    path = os.path.join(result.output_dir, CSV_NAME)
    atomic_write_text(path, buf.getvalue())
    return path


_STYLE = """
body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; }
td, th { border-bottom: 1px solid #ccc; padding: 4px 8px; vertical-align: top; text-align: left; }
img { max-width: 100%; }
li.match { color: #0a0; } li.mismatch { color: #d00; } li.ignored { color: #999; }
.note { color: #555; }
"""


def write_index_html(
    result: RankedVisualization, query: Items, gallery: Items, title: str = "Ranked results", description: str = ""
) -> str:
    """Write ``index.html`` listing each drawn query (AP, picture, top-K file names); return its path.

    Each query is a ``<tr class="query">`` with ``data-query-index``; each shown gallery entry
    is an ``<li>`` of class ``match``, ``mismatch`` or ``ignored``.
    """
    e = html.escape
    out: List[str] = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{e(title)}</h1>",
    ]
    if description:
        out.append(f"<p>{e(description)}</p>")
    out.append(
        f"<p>{len(result.pictures)} queries. Green: same identity as the query; red: a different identity; "
        "grey: ignored by the metric (same identity and camera as the query). Ranks count only the "
        "entries the metric counts. camid is the 0-based camera id (Market-1501's c1 is camid 0). "
        f"Per-result data: <a href=\"{quote(CSV_NAME)}\">{e(CSV_NAME)}</a>.</p>"
    )
    for note in result.notes:
        out.append(f'<p class="note">{e(note)}</p>')
    out.append("<table><thead><tr><th>#</th><th>query</th><th>AP</th><th>top results</th></tr></thead><tbody>")
    for pic in result.pictures:
        qi = pic.query_index
        qname = os.path.basename(str(query.paths[qi]))
        ap_cells = "<br>".join(f"{e(r.label)}: {_ap_text(r.ap)}" for r in pic.rows)
        lists = []
        for row in pic.rows:
            items = []
            r = row.ranked
            for gi, rank, dist, match, ign in zip(r.gallery_index, r.rank, r.distance, r.match, r.ignored):
                cls = "ignored" if ign else ("match" if match else "mismatch")
                mark = "ignored" if ign else ("match" if match else "no match")
                where = "-" if ign else f"#{int(rank)}"
                items.append(
                    f'<li class="{cls}">{where} {e(os.path.basename(str(gallery.paths[gi])))} '
                    f"(pid {int(gallery.pids[gi])}, camid {int(gallery.camids[gi])}, d={float(dist):.4f}, {mark})</li>"
                )
            head = f"<b>{e(row.label)}</b>" if len(pic.rows) > 1 or row.label != "original" else ""
            lists.append(f"{head}<ul>{''.join(items)}</ul>")
        out.append(
            f'<tr class="query" data-query-index="{qi}"><td>{pic.number}</td>'
            f'<td class="qname">{e(qname)}<br>index {qi}, pid {int(query.pids[qi])}, camid {int(query.camids[qi])}</td>'
            f"<td>{ap_cells}</td><td>{''.join(lists)}</td></tr>"
        )
        out.append(
            f'<tr class="picture"><td></td><td colspan="3"><img loading="lazy" src="{e(quote(pic.image_file))}" '
            f'alt="ranked results of {e(qname)}"></td></tr>'
        )
    out.append("</tbody></table></body></html>")
    path = os.path.join(result.output_dir, HTML_NAME)
    atomic_write_text(path, "\n".join(out) + "\n")
    return path
