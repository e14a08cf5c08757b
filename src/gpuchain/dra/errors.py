"""The DRA plugin's error for a claim it cannot prepare, shared by the driver and its helpers."""


class PrepareError(Exception):
    """A claim cannot be prepared (or unprepared) on this node; the message says which and why."""
