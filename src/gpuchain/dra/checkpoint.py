"""The plugin's memory across restarts: which claims are prepared, with what devices and CDI ids.

The kubelet may call Prepare again for a claim it prepared before the plugin restarted, and
Unprepare for one the new process never saw. The checkpoint makes both answers the same as
before the restart. It is one JSON file, replaced atomically on every change, so a crash leaves
the old or the new content, never a torn one.

The file leads and memory follows: a change is made to the claims in memory only once the file
holding it is written and synced (the directory too, so the rename survives a power loss). A write
that fails (the state directory's file system full) raises and leaves memory as the file is, so the
plugin never answers from a claim a restart would not find.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuchain.common.files import atomic_write
from gpuchain.dra.shares import Share

VERSION = 1
FILE_NAME = "checkpoint.json"


class CheckpointError(ValueError):
    """The checkpoint file cannot be read; the message names the file and what is wrong."""


@dataclass(frozen=True, kw_only=True)
class CreatedInstance:
    """A MIG GPU instance Prepare created for a partitionable device, which Unprepare destroys.

    Profile and start are kept beside the id so Unprepare destroys only that instance: an id
    names a different instance once the one it named is gone."""

    gpu_index: int
    gi_id: int
    profile: str
    start: int


@dataclass(frozen=True, kw_only=True)
class PreparedDevice:
    """One device of a prepared claim, as NodePrepareResources reports it.

    ``uuid`` and ``device_node`` are kept so the CDI spec can be rewritten from the checkpoint
    alone: ``/var/run/cdi`` is a tmpfs that a reboot empties while the checkpoint survives.
    """

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    uuid: str = ""
    device_node: str = ""
    created: CreatedInstance | None = None
    share: Share | None = None


@dataclass(frozen=True, kw_only=True)
class PreparedClaim:
    """A prepared claim: who it is and what Prepare answered."""

    uid: str
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]

    def to_dict(self) -> dict[str, Any]:
        devices: list[dict[str, Any]] = []
        for d in self.devices:
            device: dict[str, Any] = {
                "requests": list(d.requests),
                "pool": d.pool,
                "device": d.device,
                "cdiIds": list(d.cdi_ids),
                "uuid": d.uuid,
                "deviceNode": d.device_node,
            }
            if d.created is not None:
                c = d.created
                device["createdInstance"] = {"gpu": c.gpu_index, "gi": c.gi_id, "profile": c.profile, "start": c.start}
            if d.share is not None:
                device["share"] = {
                    "id": d.share.share_id,
                    "memoryMiB": d.share.memory_mib,
                    "multiprocessors": d.share.multiprocessors,
                    "gpuMultiprocessors": d.share.gpu_multiprocessors,
                }
            devices.append(device)
        return {"namespace": self.namespace, "name": self.name, "devices": devices}

    @classmethod
    def from_dict(cls, uid: str, data: dict[str, Any]) -> PreparedClaim:
        devices = tuple(
            PreparedDevice(
                requests=tuple(d["requests"]),
                pool=str(d["pool"]),
                device=str(d["device"]),
                cdi_ids=tuple(d["cdiIds"]),
                uuid=str(d["uuid"]),
                device_node=str(d["deviceNode"]),
                created=_created(d.get("createdInstance")),
                share=_share(d.get("share")),
            )
            for d in data["devices"]
        )
        return cls(uid=uid, namespace=str(data["namespace"]), name=str(data["name"]), devices=devices)


def _created(data: dict[str, Any] | None) -> CreatedInstance | None:
    if data is None:
        return None
    return CreatedInstance(
        gpu_index=int(data["gpu"]), gi_id=int(data["gi"]), profile=str(data["profile"]), start=int(data["start"])
    )


def _share(data: dict[str, Any] | None) -> Share | None:
    if data is None:
        return None
    return Share(
        share_id=str(data["id"]),
        memory_mib=int(data["memoryMiB"]),
        multiprocessors=int(data["multiprocessors"]),
        gpu_multiprocessors=int(data["gpuMultiprocessors"]),
    )


class Checkpoint:
    """Prepared claims by UID, saved to ``path`` on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._claims = self._load()

    def _load(self) -> dict[str, PreparedClaim]:
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(raw)
            if data.get("version") != VERSION:
                raise CheckpointError(f"{self.path}: version {data.get('version')!r}, this plugin reads {VERSION}")
            return {uid: PreparedClaim.from_dict(uid, c) for uid, c in data["claims"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            if isinstance(exc, CheckpointError):
                raise
            raise CheckpointError(
                f"{self.path}: unreadable checkpoint ({exc}); move it aside to start with no prepared claims"
            ) from None

    def _save(self, claims: Mapping[str, PreparedClaim]) -> None:
        """Write ``claims`` as the whole file, synced with its directory (``atomic_write``); raises
        OSError, file unchanged."""
        data = {"version": VERSION, "claims": {uid: c.to_dict() for uid, c in sorted(claims.items())}}
        atomic_write(self.path, data=json.dumps(data, indent=2) + "\n")

    def get(self, uid: str) -> PreparedClaim | None:
        """The prepared claim, or None."""
        return self._claims.get(uid)

    def claims(self) -> list[PreparedClaim]:
        """Every prepared claim."""
        return list(self._claims.values())

    def add(self, claim: PreparedClaim) -> None:
        """Record a prepared claim: saved first, then remembered. Raises OSError when the file cannot
        be written; the claim is then neither on disk nor in memory."""
        claims = {**self._claims, claim.uid: claim}
        self._save(claims)
        self._claims = claims

    def discard(self, uid: str) -> bool:
        """Forget a claim: saved first, then forgotten; False when it was not there. Raises OSError
        when the file cannot be written; the claim is then still recorded on disk and in memory."""
        if uid not in self._claims:
            return False
        claims = {u: c for u, c in self._claims.items() if u != uid}
        self._save(claims)
        self._claims = claims
        return True
