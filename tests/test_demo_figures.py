"""The demo's figures quoted in README.md, docs/ and datasets/README.md are those of the latest
`make demo` measurement in docs/benchmarks.md, and the stated spread is the measured one.

docs/benchmarks.md lists every demo measurement in the table after ``<!-- demo-measurements``;
a quote is the block (paragraph, table or code block) after a ``<!-- demo-figures -->`` line,
a statement of the spread the block after ``<!-- demo-spread -->``.
"""
import glob
import os
import re
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "datasets", "README.md")] + sorted(
    glob.glob(os.path.join(ROOT, "docs", "*.md")))
TWO_DECIMALS = re.compile(r"(?<![\d.])\d+\.\d\d(?!\.?\d)")  # not a version such as 2.14.1


def read(path: str) -> str:
    return open(path, encoding="utf-8").read()


def measurements() -> List[Dict[str, str]]:
    """The rows of docs/benchmarks.md's demo table, by column name."""
    text = read(os.path.join(ROOT, "docs", "benchmarks.md"))
    table = text[text.index("<!-- demo-measurements"):].split("-->", 1)[1].strip().split("\n\n")[0]
    header, _, *rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.splitlines()]
    return [dict(zip(header, row)) for row in rows]


def figures(row: Dict[str, str]) -> List[str]:
    """The row's figures as written: plain R-1 ... mINP, then the re-ranked five."""
    plain = [row[k] for k in ("R-1", "R-5", "R-10", "mAP", "mINP")]
    return plain + [v.strip() for v in row["re-ranked R-1 / R-5 / R-10 / mAP / mINP"].split("/")]


def latest_make_demo(rows: List[Dict[str, str]]) -> Dict[str, str]:
    demo = [r for r in rows if "`make demo`" in r["threads"]]
    return max(demo, key=lambda r: r["date"])  # the last row of the newest date


def blocks(marker: str) -> Dict[str, List[str]]:
    """{file: [block after each marker]}; a block ends at a blank line (a code block at its end)."""
    found: Dict[str, List[str]] = {}
    for path in DOCS:
        parts = read(path).split(f"<!-- {marker} -->")[1:]
        for part in parts:
            part = part.lstrip("\n")
            end = part.index("```", 3) + 3 if part.startswith("```") else (part + "\n\n").index("\n\n")
            found.setdefault(os.path.relpath(path, ROOT), []).append(part[:end])
    return found


def test_the_measurement_table_has_a_latest_make_demo_row():
    rows = measurements()
    latest = latest_make_demo(rows)
    assert len(rows) >= 3 and len({r["threads"].split()[0] for r in rows}) >= 2  # two thread counts
    assert all(TWO_DECIMALS.fullmatch(v) for v in figures(latest)), latest


def test_every_quote_of_the_demo_figures_is_the_latest_measurement():
    latest = latest_make_demo(measurements())
    allowed = set(figures(latest))
    quotes = blocks("demo-figures")
    # The places a first-time user reads them must stay marked (so that they stay checked).
    assert {"README.md", "datasets/README.md", "docs/getting_started.md", "docs/model_zoo.md",
            "docs/evaluation.md", "docs/visualization.md"} <= set(quotes)
    for path, found in quotes.items():
        for block in found:
            numbers = TWO_DECIMALS.findall(block)
            assert latest["R-1"] in numbers and latest["mAP"] in numbers, (path, block)
            stale = [n for n in numbers if n not in allowed]
            assert not stale, f"{path}: {stale} are not the latest demo figures {sorted(allowed)}:\n{block}"


def test_the_stated_spread_is_the_measured_one():
    rows = measurements()

    def span(column: str, rerank: bool = False) -> str:
        """min-max of a column over the rows that have it (1 decimal)."""
        position = {"R-1": 0, "mAP": 3}[column]
        cells = [row["re-ranked R-1 / R-5 / R-10 / mAP / mINP"].split("/") if rerank else [row[column]]
                 for row in rows]
        values = [float(c[position if rerank else 0]) for c in cells if c[0].strip()]
        return f"{min(values):.1f}-{max(values):.1f}"

    expected = [f"R-1 {span('R-1')}", f"mAP {span('mAP')}"]
    statements = blocks("demo-spread")
    assert {"README.md", "docs/benchmarks.md"} <= set(statements)
    for path, found in statements.items():
        for block in found:
            for text in expected:
                assert text in block, (path, text, block)
    rerank = f"R-1 {span('R-1', True)}, mAP {span('mAP', True)}"
    assert rerank in statements["docs/benchmarks.md"][0]
