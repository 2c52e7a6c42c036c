"""The recipe's report: tracking and cross-camera scores before and after the adaptation.

The figures are read from the tracking stages' own files (tools/track.py's metrics.json: TrackEval's
HOTA and IDF1 per sequence and COMBINED; tools/link_cameras.py's metrics.json: the multi-camera
IDF1 per scene and combined), never recomputed, so the report and the stages cannot disagree.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

from reid.utils.file_io import atomic_write_text

#: TrackEval's figures reported per sequence and COMBINED; the multi-camera ones per scene and combined.
TRACK_METRICS = ("HOTA", "IDF1")
MULTI_METRICS = ("IDF1",)
REPORT_JSON, REPORT_MD = "report.json", "report.md"


def _load(path: Optional[str]) -> Optional[Dict[str, Any]]:
    if not path or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def stage_scores(stage: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """A tracking stage's scores (from its record's result): ``tracking`` {sequence or COMBINED:
    {HOTA, IDF1}} and ``multi_camera`` {scene or COMBINED: {IDF1}}; None without ground truth."""
    track = _load(stage.get("track_metrics"))
    run = (track or {}).get("runs", {}).get(stage["label"], {})
    if not run.get("metrics"):
        return None
    tracking = {name: {m: float(v[m]) for m in TRACK_METRICS} for name, v in run["metrics"].items()}
    links = _load(stage.get("links_metrics")) or {}
    multi = {name: {m: float(v[m]) for m in MULTI_METRICS} for name, v in links.get("multi_camera", {}).items()}
    if links.get("multi_camera_combined"):
        multi["COMBINED"] = {m: float(links["multi_camera_combined"][m]) for m in MULTI_METRICS}
    return {"tracking": tracking, "multi_camera": multi}


def _differences(before: Dict[str, Any], after: Dict[str, Any]) -> Dict[str, Any]:
    return {part: {name: {m: after[part][name][m] - v[m] for m in v} for name, v in before[part].items()
                   if name in after[part]} for part in ("tracking", "multi_camera")}


def _counts(stage: Dict[str, Any]) -> Dict[str, Any]:
    return {k: stage[k] for k in ("tracks", "identities", "identities_in_several_cameras", "link_threshold")}


def build_report(before: Dict[str, Any], crops: Dict[str, Any], adapted: Dict[str, Any], after: Dict[str, Any],
                 settings: Dict[str, Any]) -> Dict[str, Any]:
    """report.json's content from the four stages' results (their done.json's ``result``)."""
    scores = {"before": stage_scores(before), "after": stage_scores(after)}
    truth = scores["before"] is not None and scores["after"] is not None
    report: Dict[str, Any] = {
        "settings": settings, "ground_truth": truth,
        "models": {"before": {"label": before["label"], **before["model"]},
                   "after": {"label": after["label"], **after["model"]}},
        "counts": {"before": _counts(before), "after": _counts(after),
                   "crops": crops["crops"], "tracklets": crops["tracklets"], "cameras": crops["cameras"],
                   "last_clustering": adapted.get("clusters")},
        "adaptation": adapted.get("settings"),
        "sources": {"before": {"tracking": before["track_metrics"], "multi_camera": before.get("links_metrics")},
                    "after": {"tracking": after["track_metrics"], "multi_camera": after.get("links_metrics")}},
    }
    if truth:
        report.update(scores)
        report["difference"] = _differences(scores["before"], scores["after"])
    return report


def _row(what: str, before: float, after: float) -> str:
    return f"| {what} | {before:.2f} | {after:.2f} | {after - before:+.2f} |"


def report_table(report: Dict[str, Any]) -> str:
    """report.md: the scores before and after with their differences, or the counts without ground truth."""
    lines: List[str] = []
    if report["ground_truth"]:
        lines += ["| figure | before | after | difference |", "|---|---|---|---|"]
        b, a = report["before"], report["after"]
        names = [n for n in b["tracking"] if n != "COMBINED"] + ["COMBINED"]
        for m in TRACK_METRICS:
            lines += [_row(f"{m} {n}", b["tracking"][n][m], a["tracking"][n][m]) for n in names if n in a["tracking"]]
        scenes = [n for n in b["multi_camera"] if n != "COMBINED"]
        scenes += ["COMBINED"] if "COMBINED" in b["multi_camera"] else []
        for m in MULTI_METRICS:
            lines += [_row(f"multi-camera {m} {n}", b["multi_camera"][n][m], a["multi_camera"][n][m])
                      for n in scenes if n in a["multi_camera"]]
    else:
        lines.append("No ground truth in every sequence: no scores; what the stages found:")
    c = report["counts"]
    lines += ["", "| count | before | after |", "|---|---|---|"]
    for key in ("tracks", "identities", "identities_in_several_cameras"):
        lines.append(f"| {key.replace('_', ' ')} | {c['before'][key]} | {c['after'][key]} |")
    clusters = c.get("last_clustering") or {}
    lines += ["", f"Adapted on {c['crops']} crops of {c['tracklets']} tracklets from cameras "
              f"{', '.join(str(x) for x in c['cameras'])}"
              + (f"; last clustering: {clusters.get('clusters')} clusters of {clusters.get('images_kept')} crops"
                 if clusters else "") + "."]
    return "\n".join(lines) + "\n"


def summary_line(report: Dict[str, Any]) -> str:
    """The one line printed at the end."""
    c = report["counts"]
    if not report["ground_truth"]:
        return (f"no ground truth, no scores: {c['before']['identities']} -> {c['after']['identities']} identities "
                f"({c['before']['identities_in_several_cameras']} -> {c['after']['identities_in_several_cameras']} in "
                f"several cameras), {c['crops']} crops adapted on")
    parts = []
    for label, part, m in (("HOTA", "tracking", "HOTA"), ("IDF1", "tracking", "IDF1"),
                           ("multi-camera IDF1", "multi_camera", "IDF1")):
        if "COMBINED" in report["before"][part] and "COMBINED" in report["after"][part]:
            b, a = report["before"][part]["COMBINED"][m], report["after"][part]["COMBINED"][m]
            parts.append(f"{label} {b:.2f} -> {a:.2f} ({a - b:+.2f})")
    return "adapted: " + ", ".join(parts)


def write_report(output: str, report: Dict[str, Any]) -> List[str]:
    """report.json and report.md in `output`; returns their paths."""
    paths = [os.path.join(output, REPORT_JSON), os.path.join(output, REPORT_MD)]
    atomic_write_text(paths[1], report_table(report))
    atomic_write_text(paths[0], json.dumps(report, indent=1, default=str))  # last: its presence means complete
    return paths


__all__ = ["REPORT_JSON", "REPORT_MD", "build_report", "report_table", "stage_scores", "summary_line", "write_report"]
