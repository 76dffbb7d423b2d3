"""Duration and byte-size option values (veotrace.units)."""

import pytest

from veotrace.errors import UsageError
from veotrace.units import parse_bytes, parse_duration


@pytest.mark.parametrize(
    ("text", "bare", "seconds"),
    [("300", "s", 300.0), ("300s", "s", 300.0), ("5m", "s", 300.0), ("1h", "s", 3600.0),
     ("1.5h", "s", 5400.0), ("5ms", "s", 0.005), ("5", "ms", 0.005), ("250us", "ms", 250e-6),
     ("2 min", "s", 120.0), (60.0, "s", 60.0), ("1e3ns", "s", 1e-6)],
)
def test_durations(text, bare, seconds):
    assert parse_duration(text, option="--window", bare_unit=bare) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "abc", "5 parsecs", "-5s", "0", "5x", "inf"])
def test_bad_durations_name_the_option(text):
    with pytest.raises(UsageError, match="--window"):
        parse_duration(text, option="--window")


@pytest.mark.parametrize(
    ("text", "size"),
    [("4096", 4096), ("80GiB", 80 * 2**30), ("2MiB", 2 * 2**20), ("2M", 2 * 2**20), ("1GB", 10**9),
     ("512 KiB", 512 * 1024), ("1.5GiB", 3 * 2**29)],
)
def test_bytes(text, size):
    assert parse_bytes(text, option="--capacity") == size


@pytest.mark.parametrize("text", ["", "x", "80 gallons", "0", "-1GiB", "1e30"])
def test_bad_bytes_name_the_option(text):
    with pytest.raises(UsageError, match="--capacity"):
        parse_bytes(text, option="--capacity")
