"""The calendar days a question names (issue 36): "On May 2nd, what did I …?",
"What did I tell you on 2 May 2023?", "我5月3日去了哪里？", "五月二号我心情怎么样？".

A memory question that names a day asks about what was said that day, and every card
knows when its words were said (`created_at`, the turn's said-at time through every
door, issue 35). `mentioned` finds the days; search counts a card said on a named day
as evidence (`retrieval.search.DATE_WEIGHT`). The date's words stay in the query: a
fact may say "on May 2nd" itself (measured both ways: stripping them gained nothing).

What it reads: a month name (English, full or abbreviated; "May" only beside a day)
with a day, either order, an optional year (the verb "may" is not the month: the month
is written "May"); ISO dates (2023-05-02); Chinese
month-day dates in digits or numerals (5月2日, 五月二号), with an optional year. A day
without a year matches that day of any year. What it cannot read: relative days
("yesterday", "last Monday", 昨天 — they need the time the question was asked, and a
question replayed later would point at another day), numeric forms whose order is a
locale's (5/2 is May 2nd or February 5th), weeks, months alone and ranges.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_MONTHS = {
    "january": 1,
    "february": 2,
    "march": 3,
    "april": 4,
    "may": 5,
    "june": 6,
    "july": 7,
    "august": 8,
    "september": 9,
    "october": 10,
    "november": 11,
    "december": 12,
    "jan": 1,
    "feb": 2,
    "mar": 3,
    "apr": 4,
    "jun": 6,
    "jul": 7,
    "aug": 8,
    "sep": 9,
    "sept": 9,
    "oct": 10,
    "nov": 11,
    "dec": 12,
}
_MONTH = "(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s+(?P<year>(?:19|20)\d\d))?"
_ENGLISH = (
    re.compile(r"\b" + _MONTH + r"\s+(?:the\s+)?" + _DAY + r"\b" + _YEAR, re.IGNORECASE),
    re.compile(r"\b" + _DAY + r"\s+(?:of\s+)?" + _MONTH + r"\b" + _YEAR, re.IGNORECASE),
)
_ISO = re.compile(r"\b(?P<year>(?:19|20)\d\d)-(?P<month>[01]?\d)-(?P<day>[0-3]?\d)\b", re.IGNORECASE)
_HAN_DIGITS = "〇零一二两三四五六七八九十"
_ZH_NUMBER = rf"(?:\d{{1,2}}|[{_HAN_DIGITS}]{{1,3}})"
_CHINESE = re.compile(
    rf"(?:(?P<year>\d{{4}}|[{_HAN_DIGITS}]{{4}})年)?(?P<month>{_ZH_NUMBER})月(?P<day>{_ZH_NUMBER})[日号號]"
)
_HAN_VALUE = {
    "〇": 0,
    "零": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_DAYS_IN = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True)
class Day:
    """A calendar day a question names; `year` None: that day of any year."""

    month: int
    day: int
    year: int | None = None

    def prefix(self) -> str:
        """How an ISO timestamp said on this day starts (without the year: its
        characters 6–10)."""
        month_day = f"{self.month:02d}-{self.day:02d}"
        return month_day if self.year is None else f"{self.year:04d}-{month_day}"


def _number(text: str) -> int | None:
    """An Arabic or a Chinese numeral up to 99 (十二, 二十, 三十一; a year's digits one
    by one: 二〇二三)."""
    if text.isdigit():
        return int(text)
    if "十" not in text:
        digits = [_HAN_VALUE.get(ch) for ch in text]
        if any(d is None for d in digits):
            return None
        return int("".join(str(d) for d in digits))
    tens, _, ones = text.partition("十")
    high = 1 if not tens else _HAN_VALUE.get(tens)
    low = 0 if not ones else _HAN_VALUE.get(ones)
    if high is None or low is None or len(tens) > 1 or len(ones) > 1:
        return None
    return high * 10 + low


def _day(month: int | None, day: int | None, year: int | None) -> Day | None:
    if month is None or day is None or not 1 <= month <= 12 or not 1 <= day <= _DAYS_IN[month - 1]:
        return None
    if year is not None and not 1900 <= year <= 2199:
        year = None
    return Day(month, day, year)


def mentioned(text: str) -> list[Day]:
    """The days `text` names, in order, once each."""
    found: list[Day] = []
    spans: list[tuple[int, int]] = []

    def take(match: re.Match[str], month: int | None, day: int | None, year: int | None) -> None:
        start, end = match.span()
        if any(start < b and a < end for a, b in spans):
            return  # "May 2, 2023" read once, not again as "2, 2023"
        named = _day(month, day, year)
        if named is None:
            return
        spans.append((start, end))
        if named not in found:
            found.append(named)

    for pattern in _ENGLISH:
        for m in pattern.finditer(text):
            if m["month"] == "may":  # the verb ("you may 2…"); the month is written May
                continue
            take(m, _MONTHS[m["month"].lower()], int(m["day"]), int(m["year"]) if m["year"] else None)
    for m in _ISO.finditer(text):
        take(m, int(m["month"]), int(m["day"]), int(m["year"]))
    for m in _CHINESE.finditer(text):
        take(m, _number(m["month"]), _number(m["day"]), _number(m["year"]) if m["year"] else None)
    return found
