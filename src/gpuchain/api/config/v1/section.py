"""What every section of the config file shares, so each concern's module builds on one base."""

from __future__ import annotations

from typing import Any


class Section:
    """What every section shares: unknown keys refused, and ``null`` read as not given."""

    @staticmethod
    def _before(data: Any) -> Any:
        """A key given as ``null`` is a key not given: NVIDIA's Go structs hold pointers, and the
        JSON its components log writes every unset one as ``null``."""
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data
