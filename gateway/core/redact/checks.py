"""Checksums and shape checks that keep the PII rules from masking ordinary numbers.

Each `refine_*` takes a candidate regex match and returns the spans (within the matched string)
to mask. Candidates are deliberately loose; these functions carry the precision.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

Span = tuple[int, int]

# IBAN lengths per country (SWIFT IBAN registry).
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20,
    "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18,
    "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24,
    "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24,
    "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}

_CARD_IIN = re.compile(
    r"4|5[1-5]|2(?:2[2-9]|[3-6][0-9]|7[01]|720)|3[47]|3(?:0[0-5]|[68])|35(?:2[89]|[3-8])"
    r"|6(?:011|5|4[4-9]|2)"
)
_GROUP = re.compile(r"\d+")


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def card_ok(digits: str) -> bool:
    return 13 <= len(digits) <= 19 and _CARD_IIN.match(digits) is not None and luhn_ok(digits)


def refine_card(m: re.Match[str]) -> Iterator[Span]:
    """The longest Luhn-valid card made of the candidate's first digit groups.

    A candidate may carry a stray group after the card ("4111 1111 1111 1111 12/27"). A card that
    starts at a later group is found by the caller's next search, which starts inside a candidate
    that yields nothing.
    """
    text = m.group()
    digits = ""
    ends: list[tuple[int, int]] = []  # (digits so far, end of that group in text)
    for g in _GROUP.finditer(text):
        digits += g.group()
        ends.append((len(digits), g.end()))
    for count, end in reversed(ends):
        if 13 <= count <= 19 and card_ok(digits[:count]):
            yield m.start(), m.start() + end
            return


def iban_ok(compact: str) -> bool:
    if IBAN_LENGTHS.get(compact[:2]) != len(compact):
        return False
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(ch, 36)) for ch in moved)
    return int(number) % 97 == 1


def refine_iban(m: re.Match[str]) -> Iterator[Span]:
    """The candidate may run on into a following group of digits or capitals: keep exactly the
    country's length, if that ends at a group boundary, and check mod-97."""
    text = m.group()
    want = IBAN_LENGTHS.get(text[:2], 0)
    kept = 0
    for end, ch in enumerate(text, 1):
        kept += ch != " "
        if kept == want:
            if (end == len(text) or text[end] == " ") and iban_ok(text[:end].replace(" ", "")):
                yield m.start(), m.start() + end
            return


_PHONE_GROUP = re.compile(r"[ .-]?(?:\([0-9]{1,4}\)|[0-9]+)$")


def refine_phone(m: re.Match[str]) -> Iterator[Span]:
    """International numbers carry 8-15 digits (E.164); national ones 10-11 with the trunk 0.
    Trailing groups beyond that belong to something else ("+44 20 7946 0958 2024"): drop them."""
    text = m.group()
    low, high = (8, 15) if text.startswith("+") else (10, 11)
    digits = sum(ch.isdigit() for ch in text)
    while digits > high and (tail := _PHONE_GROUP.search(text)) is not None and tail.start() > 0:
        digits -= sum(ch.isdigit() for ch in tail.group())
        text = text[: tail.start()]
    if low <= digits <= high:
        yield m.start(), m.start() + len(text)


def has_letter_and_digit(text: str) -> bool:
    """Real tokens are random: they mix letters and digits. Placeholders and prose do not."""
    return any(ch.isdigit() for ch in text) and any(ch.isalpha() for ch in text)
