"""What a ranked-result visualisation wrote: pictures, their rows, and the report files.

Shared by the drawing (ranked_list) and the report writers (html_report), so neither needs
the other's module for its types.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from .ranking import RankedRow


@dataclass
class ShownRow:
    """One drawn row: which order it is ("original" or "re-ranked"), the query's AP in that
    order (fraction, NaN if unknown), and the entries shown."""

    label: str
    ap: float
    ranked: RankedRow


@dataclass
class QueryPicture:
    """One written picture: the query, its file inside the output folder, and its rows."""

    number: int  # 1-based position in drawing order (file names sort the same way)
    query_index: int
    image_file: str
    rows: List[ShownRow]


@dataclass
class RankedVisualization:
    """Everything `visualize_ranked_results` wrote."""

    output_dir: str
    pictures: List[QueryPicture]
    notes: List[str] = field(default_factory=list)
    html_path: Optional[str] = None
    csv_path: Optional[str] = None
