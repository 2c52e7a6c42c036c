"""Regular expressions from configs run within bounds: refused shapes, length caps, a time limit per name."""
import pytest

from reid.utils.safe_regex import MAX_NAME, MAX_PATTERN, RegexError, compile_bounded, search_names

KEY = "DATASETS.UNLABELLED.CAMERA_REGEX"


@pytest.mark.parametrize("pattern, why", [
    ("(a+)+$", "repeats a group that holds a repeat of its own"),
    (r"(\d*)*x", "repeats a group that holds a repeat of its own"),
    (r"(?:_c\d+)+", "repeats a group that holds a repeat of its own"),
    ("(a|ab)*c", "repeats a group that holds alternatives"),
    (r"(\w+)_\1", "back-reference"),
    (r"(c)?(?(1)\d|x)", "back-reference"),
])
def test_shapes_that_backtrack_exponentially_are_refused_up_front(pattern, why):
    with pytest.raises(RegexError, match=rf"{KEY} .* can take exponential time on a file name that does not match: "
                                         rf".*{why}.*e\.g\. '_c\(\\\\d\+\)'"):
        compile_bounded(pattern, KEY, example=r"_c(\d+)")


@pytest.mark.parametrize("pattern", [r"_c(\d+)", r"^(\d+)_", r"c(\d)s\d+_\d+", r"(?:cam|c)(\d+)", r"(a{2})+", "(x|y)*z"])
def test_ordinary_patterns_pass(pattern):
    assert compile_bounded(pattern, KEY).pattern == pattern


def test_lengths_are_capped():
    with pytest.raises(RegexError, match=f"is {MAX_PATTERN + 1} characters long .* at most {MAX_PATTERN}"):
        compile_bounded("a" * (MAX_PATTERN + 1), KEY)
    with pytest.raises(RegexError, match=f"is {MAX_NAME + 1} characters long; names of at most {MAX_NAME}"):
        search_names(compile_bounded("(b)", KEY), ["ok", "x" * (MAX_NAME + 1)], KEY)
    with pytest.raises(RegexError, match=r"'_c\(' is not a regular expression \(missing \), unterminated subpattern"):
        compile_bounded("_c(", KEY)


def test_search_names_gives_each_names_groups_in_order():
    names = [f"{i:04d}_c{i % 6 + 1}s1_{i}.jpg" for i in range(500)] + ["no camera.jpg", "caf\u00e9_c7_\udcff.jpg"]
    found = search_names(compile_bounded(r"_c(\d+)", KEY), names, KEY)
    assert found[:3] == [("1",), ("2",), ("3",)] and found[500] is None and found[501] == ("7",)
    assert len(found) == len(names) and search_names(compile_bounded("x", KEY), [], KEY) == []


@pytest.mark.slow
def test_a_name_that_takes_too_long_stops_the_match_with_its_name():
    # Polynomial, not refused by shape: on 200 digits and no 'x' it would run for hours.
    pattern = compile_bounded(r"\d*\d*\d*\d*\d*\d*x", KEY)
    with pytest.raises(RegexError, match=r"took more than 0.3 s on the name '1111.*!' and was stopped"):
        search_names(pattern, ["12x", "1" * 200 + "!", "never reached"], KEY, seconds_per_name=0.3)


@pytest.mark.slow
def test_the_first_name_gets_its_time_limit_not_the_start_up_allowance_as_well():
    """The first name was given the 30 s start-up allowance on top of its 2 s, and the error then said
    'took more than 2 s' after 32 s."""
    import time

    pattern = compile_bounded(r"\d*\d*\d*\d*\d*\d*x", KEY)
    start = time.monotonic()
    with pytest.raises(RegexError, match=r"took more than 0.3 s on the name '1111.*!'"):
        search_names(pattern, ["1" * 200 + "!", "12x"], KEY, seconds_per_name=0.3)
    assert time.monotonic() - start < 10  # start-up (well under a second here) + 0.3 s, not 30 s more
