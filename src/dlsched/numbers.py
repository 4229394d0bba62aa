"""What counts as a number in a record, a document or an API answer."""
from __future__ import annotations

from typing import Any


def is_number(v: Any) -> bool:
    """An int or a float, and not a bool: JSON's true would otherwise pass as 1."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)
