"""Query parameters of the API as text in, checked values out (one line naming the parameter when not)."""
from __future__ import annotations

from typing import List, Optional

from reid.store.times import parse_time as store_time

#: Most results one search returns.
MAX_K = 200
#: Most cameras one filter names.
MAX_CAMERAS = 1000


def parse_time(value: Optional[str], name: str) -> Optional[float]:
    """Seconds since 1970 UTC from epoch seconds or ISO-8601 (reid.store.times); None for no value."""
    if value is None or value == "":
        return None
    return store_time(value[:40], name)


def parse_cameras(value: Optional[str]) -> Optional[List[int]]:
    """Camera numbers from "2,3,5" (None or "": every camera)."""
    if value is None or value.strip() == "":
        return None
    parts = [p.strip() for p in value.split(",")]
    if len(parts) > MAX_CAMERAS or not all(p.lstrip("-").isdigit() and len(p) <= 12 for p in parts):
        raise ValueError(f"cameras {value[:40]!r} must be camera numbers separated by commas, like 2,3,5.")
    return [int(p) for p in parts]


def check_window(start: Optional[float], end: Optional[float]) -> None:
    """One line when the window ends before it starts."""
    if start is not None and end is not None and end < start:
        raise ValueError("end is before start; swap them.")


__all__ = ["MAX_CAMERAS", "MAX_K", "check_window", "parse_cameras", "parse_time"]
