"""Write a one-layer OCI image archive (an OCI image layout in a tar) that `ctr images import` takes.

    oci_image.py OUT.tar NAME ENTRYPOINT [PATH_IN_IMAGE=FILE | PATH_IN_IMAGE->LINK_TARGET]...

The real node of tests/peers/node.py pulls nothing: its two images (the pause sandbox and
busybox-static) are made here by scripts/build-peers from local files. The archive is
deterministic (fixed timestamps and owners), so the same inputs give the same image digest.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import sys
import tarfile
from pathlib import Path

ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def _layer(entries: list[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for entry in entries:
            path = entry.split("->")[0].split("=")[0].strip("/")
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            if "->" in entry:
                info = tarfile.TarInfo(path)
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry.split("->", 1)[1], 0o777
                tar.addfile(info)
            else:
                data = Path(entry.split("=", 1)[1]).read_bytes()
                info = tarfile.TarInfo(path)
                info.size, info.mode = len(data), 0o755
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}"


def main(out: str, name: str, entrypoint: str, *entries: str) -> None:
    layer = _layer(list(entries))
    config = {
        "architecture": ARCH,
        "os": "linux",
        "config": {"Entrypoint": [entrypoint], "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
    }
    tmp = Path(out + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        config_bytes = json.dumps(config, sort_keys=True).encode()
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _blob(tar, config_bytes),
                "size": len(config_bytes),
            },
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": _blob(tar, layer), "size": len(layer)}
            ],
        }
        manifest_bytes = json.dumps(manifest, sort_keys=True).encode()
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _blob(tar, manifest_bytes),
                    "size": len(manifest_bytes),
                    "platform": {"architecture": ARCH, "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                    },
                }
            ],
        }
        for fname, data in (
            ("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
            ("index.json", json.dumps(index, sort_keys=True).encode()),
        ):
            info = tarfile.TarInfo(fname)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.rename(out)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
