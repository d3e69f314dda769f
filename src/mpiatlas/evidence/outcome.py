"""The end of one cell: its status, why, and the evidence behind it (status.json)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Outcome:
    status: str  # ok | failed | timeout | unavailable | invalid
    reason: str | None = None
    details: dict[str, Any] | None = None
