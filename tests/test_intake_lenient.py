"""What people type into number and yes/no cells, read as they meant it."""

from __future__ import annotations

import datetime

import pytest

from engine.intake.lenient import clean, fold, parse_bool, parse_integer, parse_number

NUMBERS = [  # (typed, measure, scale, value in the field's unit)
    ("1,000", "count", 1, 1000), ("1,234,567.5", "count", 1, 1234567.5), ("８", "count", 1, 8),
    ("１，０００", "count", 1, 1000), ("8 GPUs", "count", 1, 8), (" 12 ", "count", 1, 12),
    ("70B", "count", 1e9, 70), ("70 billion", "count", 1e9, 70), ("7000M", "count", 1e9, 7),
    ("70億", "count", 1e9, 7), ("2T tokens", "count", 1e9, 2000), ("1.5k", "count", 1, 1500),
    ("1M", "count", 1, 1e6), ("3萬", "count", 1, 30000), ("180e9", "count", 1, 180e9),
    ("1.8E+18", "count", 1, 1.8e18), ("1 TB", "bytes", 1e9, 1000), ("500 MB", "bytes", 1e9, 0.5),
    ("100 KB", "bytes", 1e3, 100), ("100", "bytes", 1e9, 100), ("40%", "fraction", 1, 0.4),
    ("４０％", "fraction", 1, 0.4), ("0,4", "fraction", 1, 0.4), ("100 ms", "count", 1, 100),
    ("−5", "count", 1, -5), (42, "count", 1, 42), (0.4, "fraction", 1, 0.4),
]


@pytest.mark.parametrize("typed, measure, scale, expected", NUMBERS)
def test_numbers(typed, measure, scale, expected):
    assert parse_number(typed, measure, scale) == pytest.approx(expected)


@pytest.mark.parametrize("typed", ["eight", "8 x 4", "1-2", "", "40%", True, float("nan"),
                                   datetime.date(2025, 1, 1), "about 100"])
def test_not_numbers(typed):
    with pytest.raises(ValueError):
        parse_number(typed)


def test_integers():
    assert parse_integer("16.0") == 16 and parse_integer("1,024") == 1024
    with pytest.raises(ValueError):
        parse_integer("2.5")


@pytest.mark.parametrize("typed, expected", [("yes", True), ("Y", True), ("TRUE", True), ("是", True),
                                             (1, True), ("no", False), ("否", False), ("False ", False),
                                             (0, False), (True, True)])
def test_yes_no(typed, expected):
    assert parse_bool(typed) is expected


@pytest.mark.parametrize("typed", ["maybe", 2, "", "是的吧"])
def test_not_yes_no(typed):
    with pytest.raises(ValueError):
        parse_bool(typed)


def test_text_cleaning_and_matching_keys():
    assert clean("  Ａｃｍｅ\u3000 Corp ") == "Acme Corp"
    assert fold("Fine-Tuning") == fold("fine tuning") == fold("FINE_TUNING") == "finetuning"
