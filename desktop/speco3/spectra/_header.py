"""Header values decoded straight from raw FITS card images (:class:`FastHeader`), lazily, one card at a time.

astropy's ``Header`` builds a ``Card`` per card and parses a value on every lookup (~10-40 µs each, ~2 µs per card
to build). Readers look up a dozen or two of the 40-200 cards of a header, so :class:`FastHeader` keeps each card's
raw text and decodes a value the first time it is looked up. When astropy has not parsed an HDU's header yet
(it defers that until ``hdu.header`` is touched) the raw header text is used directly and the parse never happens.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # astropy ships no type information: the name says what is passed
    from astropy.io.fits.hdu.base import _BaseHDU

#: A decoded card value: string, T/F, integer, float, or None (a blank value).
CardValue = str | bool | int | float | None

_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([EeDd][+-]?\d+)?$")
_INTEGER = re.compile(r"^[+-]?\d+$")
_STRING = re.compile(r"\s*'(.*?)'(?=\s*(?:/|$))")  # as astropy: the closing quote is followed by / or the end
_SKIPPED = ("COMMENT", "HISTORY", "HIERARCH", "CONTINUE", "END")
_END_CARD = "END" + " " * 77


class _Raw:
    """A card's raw image (80 characters, plus its CONTINUE cards), not yet decoded."""

    __slots__ = ("image",)

    def __init__(self, image: str):
        self.image = image

    def decode(self) -> CardValue:
        image = self.image
        value = _parse_value(image[10:80])
        if len(image) > 80 and isinstance(value, str):  # long string: 'part&' + CONTINUE cards
            for k in range(80, len(image), 80):
                m = _STRING.match(image[k + 8:k + 80])
                if not (m and value.endswith("&")):
                    break
                value = value[:-1] + m.group(1).replace("''", "'").rstrip()
        return value


class FastHeader(dict[str, "CardValue | _Raw"]):
    """Header values parsed straight from the raw 80-character card images, on first lookup.

    Values: strings (unquoted, trailing blanks removed), T/F as bool, int, float (also with a D exponent).
    COMMENT, HISTORY, blank and HIERARCH cards are left out; the first of duplicate keywords wins, as with
    ``Header.get``. Malformed cards keep their raw text instead of raising. Look values up with ``[]``, ``get``,
    ``items``/``values`` (all decode); ``dict(h)`` would copy undecoded cards, use ``h.to_dict()``.
    """

    @classmethod
    def from_hdu(cls, hdu: _BaseHDU) -> FastHeader:
        """Values of an HDU's header; from its raw header text when astropy has not parsed it yet."""
        raw = hdu.__dict__.get("_header_str")  # astropy defers Header parsing until .header is touched
        if isinstance(raw, str):
            return cls.from_string(raw)
        return cls._from_images(card._image or card.image for card in hdu.header._cards)  # raw: .image verifies

    @classmethod
    def from_string(cls, text: str) -> FastHeader:
        """Values from a header's raw text (80-character cards up to END), grouping CONTINUE cards as astropy does."""
        images = [text[k:k + 80] for k in range(0, len(text) - 79, 80)]
        try:
            images = images[:images.index(_END_CARD)]
        except ValueError:  # a non-blank END card (or none): look for it card by card
            for i, image in enumerate(images):
                if image[:8] == "END     " or image.rstrip() == "END":
                    images = images[:i]
                    break
        if "\nCONTINUE" in "\n".join(img[:8] for img in images):
            grouped: list[str] = []
            for image in images:
                if grouped and image[:8] == "CONTINUE":
                    grouped[-1] += image
                else:
                    grouped.append(image)
            images = grouped
        return cls._from_images(images)

    @classmethod
    def _from_images(cls, images: Iterable[str]) -> FastHeader:
        valued = [(image[:8].rstrip(), image) for image in images if image[8:10] == "= "]
        out = cls()
        first = {key: image for key, image in reversed(valued)}  # reversed: the first of duplicate keywords wins
        for key in _SKIPPED:
            first.pop(key, None)
        first.pop("", None)
        for key, _ in valued:  # card order
            image = first.pop(key, None)
            if image is not None:
                dict.__setitem__(out, key, _Raw(image))
        return out

    def __getitem__(self, key: str) -> CardValue:
        value = dict.__getitem__(self, key)
        if isinstance(value, _Raw):
            value = value.decode()
            dict.__setitem__(self, key, value)
        return value

    def get(self, key: str, default: CardValue = None) -> CardValue:  # type: ignore[override]  # dict.get's overloads; one value type here
        try:
            return self[key]
        except KeyError:
            return default

    def values(self) -> list[CardValue]:  # type: ignore[override]
        return [self[k] for k in self]

    def items(self) -> list[tuple[str, CardValue]]:  # type: ignore[override]
        return [(k, self[k]) for k in self]

    def to_dict(self) -> dict[str, CardValue]:
        """A plain dict of every decoded value."""
        return dict(self.items())

    def __repr__(self) -> str:
        return f"FastHeader({self.to_dict()!r})"


def _parse_value(text: str) -> CardValue:
    """Value of a card's value field (columns 11-80): str, bool, int, float, or the raw text / None."""
    if text.lstrip()[:1] == "'":  # only then can _STRING match
        m = _STRING.match(text)
        if m:
            return m.group(1).replace("''", "'").rstrip()
    value = text.split("/", 1)[0].strip()
    if value == "T":
        return True
    if value == "F":
        return False
    if _INTEGER.match(value):  # tested before int(): a failed int() raises, which costs more than the match
        return int(value)
    if _NUMBER.match(value):
        return float(value.replace("D", "E").replace("d", "e"))
    return value or None
