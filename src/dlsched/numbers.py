"""What counts as a number in a record, a document or an API answer."""
from __future__ import annotations

import math
from typing import Any


def is_number(v: Any) -> bool:
    """An int or a float, and not a bool: JSON's true would otherwise pass as 1."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def finite(x: Any) -> Any:
    """``x`` with every NaN/inf float as None, at any depth: JSON has neither (an API answer refuses them, and SQLite's
    JSON functions call a stored document that holds one malformed)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x
