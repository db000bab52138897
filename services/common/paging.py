"""Page tokens for list RPCs (``page_size`` / ``page_token`` / ``next_page_token``).

The token is an opaque string holding the offset of the next item; clients only pass it back.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import TypeVar

from edgetune.errors import InvalidArgument

T = TypeVar("T")
DEFAULT_PAGE_SIZE = 1000
MAX_PAGE_SIZE = 10_000
_PREFIX = "o:"


def encode_token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"{_PREFIX}{offset}".encode()).decode().rstrip("=")


def decode_token(token: str) -> int:
    """The offset in ``token`` (empty: 0); INVALID_ARGUMENT naming page_token otherwise."""
    if not token:
        return 0
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        if text.startswith(_PREFIX) and (offset := int(text[len(_PREFIX):])) >= 0:
            return offset
    except (ValueError, UnicodeDecodeError):
        pass
    raise InvalidArgument("page_token", f"{token!r} is not a token this server issued",
                          "empty or a next_page_token")


def paginate(items: Sequence[T], page_size: int, page_token: str,
             default_size: int = DEFAULT_PAGE_SIZE, max_size: int = MAX_PAGE_SIZE) -> tuple[Sequence[T], str]:
    """One page of ``items`` and the next token ("" on the last page)."""
    if page_size < 0:
        raise InvalidArgument("page_size", f"{page_size} is negative", f"0 (default {default_size}) to {max_size}")
    size = min(page_size or default_size, max_size)
    start = decode_token(page_token)
    if start > len(items):
        raise InvalidArgument("page_token", "points past the end of the list", "a next_page_token")
    end = start + size
    return items[start:end], encode_token(end) if end < len(items) else ""
