"""Regular expressions from configs run within bounds: length caps, a time limit per name."""
import pytest

from reid.utils.safe_regex import MAX_NAME, MAX_PATTERN, RegexError, compile_bounded, search_names

KEY = "DATASETS.UNLABELLED.CAMERA_REGEX"


@pytest.mark.parametrize("pattern, name", [
    ("(a+)+$", "a" * 40 + "!"),
    (r"(\d*)*x", "1" * 40),
    (r"(?:_c\d+)+$", "_c1" * 300 + "!"),
    ("(a|ab)*c", "ab" * 30),
    (r"(\w+)_\1", "a" * 1000),
    (r"\d*\d*\d*\d*\d*\d*x", "1" * 200 + "!"),
])
def test_shapes_that_re_takes_exponential_time_on_finish_at_once(pattern, name):
    """These were refused up front when ``re`` matched them (2^40 steps for the first); the regex
    package's repeat guards answer at once, well inside the time limit."""
    assert search_names(compile_bounded(pattern, KEY), [name], KEY, seconds_per_name=1.0) == [None]


@pytest.mark.parametrize("pattern", [r"_c(\d+)", r"^(\d+)_", r"c(\d)s\d+_\d+", r"(?:cam|c)(\d+)", r"(a{2})+", "(x|y)*z",
                                     r"(?:_c\d+)+", r"(\w+)_\1"])
def test_ordinary_patterns_pass(pattern):
    assert compile_bounded(pattern, KEY).pattern == pattern


def test_lengths_are_capped():
    with pytest.raises(RegexError, match=f"is {MAX_PATTERN + 1} characters long .* at most {MAX_PATTERN}"):
        compile_bounded("a" * (MAX_PATTERN + 1), KEY)
    with pytest.raises(RegexError, match=f"is {MAX_NAME + 1} characters long; names of at most {MAX_NAME}"):
        search_names(compile_bounded("(b)", KEY), ["ok", "x" * (MAX_NAME + 1)], KEY)
    with pytest.raises(RegexError, match=r"'_c\(' is not a regular expression \(missing \), unterminated subpattern"):
        compile_bounded("_c(", KEY)
    # re decides the syntax: what only the regex package knows is refused as before.
    with pytest.raises(RegexError, match=r"'\\\\p\{L\}' is not a regular expression \(bad escape \\p at position 0\)"):
        compile_bounded(r"\p{L}", KEY)


def test_search_names_gives_each_names_groups_in_order():
    names = [f"{i:04d}_c{i % 6 + 1}s1_{i}.jpg" for i in range(500)] + ["no camera.jpg", "caf\u00e9_c7_\udcff.jpg"]
    found = search_names(compile_bounded(r"_c(\d+)", KEY), names, KEY)
    assert found[:3] == [("1",), ("2",), ("3",)] and found[500] is None and found[501] == ("7",)
    assert len(found) == len(names) and search_names(compile_bounded("x", KEY), [], KEY) == []


def test_the_documented_differences_from_re():
    """safe_regex's docstring and docs/datasets.md list them: a POSIX class, fuzzy matching."""
    with pytest.warns(FutureWarning, match="Possible nested set"):  # re's own warning, as before
        posix = compile_bounded("[[:digit:]]", KEY)
    assert search_names(posix, ["5", "d]"], KEY) == [(), None]  # re: [None, ()]
    assert search_names(compile_bounded("c{e<=1}", KEY), ["x", "c{e<=1}"], KEY) == [(), ()]  # re: [None, ()]


@pytest.mark.slow
def test_a_name_that_takes_too_long_stops_the_match_with_its_name():
    # Exponential in the regex package too: on 60 digits and '!' it would run for days.
    import time

    pattern = compile_bounded(r"(\d|\d\d)+$", KEY)
    start = time.monotonic()
    with pytest.raises(RegexError, match=r"took more than 0.3 s on the name '1111.*!' and was stopped"):
        search_names(pattern, ["12", "1" * 60 + "!", "never reached"], KEY, seconds_per_name=0.3)
    assert time.monotonic() - start < 5  # the limit, not the days the match would take
