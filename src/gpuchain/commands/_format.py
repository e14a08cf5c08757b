"""The output formats and the width a pipe renders at, shared by `_output` and `_render`.

Their own module so that `_render` (rich) can use them without importing `_output`, which loads
`_render` lazily: the two never import each other in a circle.
"""

from __future__ import annotations

import enum

UNLIMITED = 100_000
"""Width a pipe or ``-o wide`` renders at: wide enough that no table is ever squeezed."""


class OutputFormat(enum.StrEnum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"

    @property
    def for_people(self) -> bool:
        """Table or wide: rendered for a person, not data for a script."""
        return self in (OutputFormat.table, OutputFormat.wide)
