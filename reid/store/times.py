"""Times as the store keeps them: seconds since 1970-01-01 UTC, from the ways people and files write them.

Light on purpose (standard library only): a tool checks ``--start-time`` while it parses its
arguments, before numpy or a database driver is imported. ISO-8601 is parsed here rather than by
``datetime.fromisoformat``, which on Python 3.10 refuses "Z", compact times and fractions other
than 3 or 6 digits.
"""
from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone

# Extended (2026-11-28T14:05:01.25+01:00) or compact (20261128T140501.250Z); seconds, fraction, zone optional.
_ISO = re.compile(r"(\d{4})-?(\d{2})-?(\d{2})(?:[T ](\d{2}):?(\d{2})(?::?(\d{2})(\.\d+)?)?)?"
                  r"(Z|[+-]\d{2}(?::?\d{2})?)?", re.IGNORECASE)
TIME_HINT = ("give seconds since 1970 (1764338701.25) or an ISO-8601 time (2026-11-28T14:05:01Z, "
             "20261128T140501.250Z)")


def _zone(text: str) -> timezone:
    if not text or text.upper() == "Z":
        return timezone.utc  # no zone: UTC, as every store time is
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0)))


def parse_time(text: str, what: str = "time") -> float:
    """Seconds since 1970 UTC of `text`: a number (epoch seconds), an ISO-8601 time
    (``2026-11-28T14:05:01.25Z``; one without a zone is taken as UTC) or its compact form
    (``20261128T140501.250Z``, as crop names carry it); one line naming `what` otherwise."""
    s = str(text).strip()
    try:
        value = float(s)
    except ValueError:
        value = None
    if value is not None:
        if not math.isfinite(value):
            raise ValueError(f"{what} {text!r} is not a finite time; {TIME_HINT}.")
        return value
    m = _ISO.fullmatch(s)
    if m is None:
        raise ValueError(f"{what} {text!r} is not a time; {TIME_HINT}.")
    year, month, day, hour, minute, second, fraction, zone = m.groups()
    try:
        stamp = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0),
                         tzinfo=_zone(zone or ""))
    except ValueError:  # month 13, hour 25, a zone beyond a day
        raise ValueError(f"{what} {text!r} is not a time; {TIME_HINT}.") from None
    return stamp.timestamp() + float(fraction or 0.0)


__all__ = ["TIME_HINT", "parse_time"]
