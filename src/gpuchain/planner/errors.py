"""The planner's one error: an input it cannot plan with, named with the field and the fix."""

from __future__ import annotations


class PlanInputError(ValueError):
    """A planner input is malformed or out of range; the message names the field and a valid example."""
