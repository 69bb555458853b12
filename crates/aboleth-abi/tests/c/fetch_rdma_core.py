"""Fetches the rdma-core source releases the EFA and Ionic encoders are cross-checked against,
each pinned by address and SHA-256, and extracts the provider headers they need into
.cache/rdma-core/, unless they are already there:

- rdma-core 56.1 (Debian's orig tarball): ``providers/efa`` (``efa_io_defs.h``), for
  crates/aboleth-abi/tests/efa_crosscheck.rs;
- rdma-core 61.0 (Ubuntu's orig tarball; Debian's pool serves no release with the ionic
  provider, which rdma-core 61 added): ``providers/ionic`` (``ionic_fw_types.h``,
  ``ionic_queue.h``), for crates/aboleth-abi/tests/ionic_crosscheck.rs.

No Debian package installs these headers. `make rdma-core-source` runs this.

    python3 crates/aboleth-abi/tests/c/fetch_rdma_core.py [DEST_DIR]   (prints the source dirs)
"""

from __future__ import annotations

import hashlib
import os
import sys
import tarfile
import urllib.request
from typing import List, NamedTuple, Tuple


class Release(NamedTuple):
    version: str
    url: str
    sha256: str
    wanted: Tuple[str, ...]
    marker: str


RELEASES = (
    Release("56.1", "http://deb.debian.org/debian/pool/main/r/rdma-core/rdma-core_56.1.orig.tar.gz",
            "63ce7f2baa7242c2dbc76375dac957c420187dd27f8c5e148efc07971ee522a8",
            ("providers/efa/",), "providers/efa/efa_io_defs.h"),
    Release("61.0", "http://archive.ubuntu.com/ubuntu/pool/main/r/rdma-core/rdma-core_61.0.orig.tar.gz",
            "340be509137103677ea30798d6ffe64a991148dae333b79a5bc0744e219fde2f",
            ("providers/ionic/",), "providers/ionic/ionic_fw_types.h"),
)
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 4))
DEFAULT_DIR = os.path.join(ROOT, ".cache", "rdma-core")


def digest(path: str) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


def fetch_release(release: Release, directory: str = DEFAULT_DIR) -> str:
    """The extracted source directory of ``release`` (``.../rdma-core-VERSION``), downloading and
    checking the archive first when needed; raises naming the address and the digests on a
    mismatch."""
    source = os.path.join(directory, f"rdma-core-{release.version}")
    marker = os.path.join(source, *release.marker.split("/"))
    if os.path.exists(marker):
        return source
    os.makedirs(directory, exist_ok=True)
    archive = os.path.join(directory, f"rdma-core_{release.version}.orig.tar.gz")
    if not (os.path.exists(archive) and digest(archive) == release.sha256):
        print(f"downloading rdma-core {release.version}'s source (2 MB) into {archive}", file=sys.stderr)
        partial = archive + ".part"
        urllib.request.urlretrieve(release.url, partial)
        found = digest(partial)
        if found != release.sha256:
            os.remove(partial)
            raise RuntimeError(f"{release.url} has SHA-256 {found}, not the pinned {release.sha256}: refusing it")
        os.replace(partial, archive)
    prefix = f"rdma-core-{release.version}/"
    with tarfile.open(archive) as tar:
        members = [member for member in tar.getmembers()
                   if member.name.startswith(prefix) and member.name[len(prefix):].startswith(release.wanted)]
        tar.extractall(directory, members=members, filter="data")
    if not os.path.exists(marker):
        raise RuntimeError(f"{archive} has no {release.marker}")
    return source


def fetch(directory: str = DEFAULT_DIR) -> List[str]:
    """Every release's source directory, fetched when needed."""
    return [fetch_release(release, directory) for release in RELEASES]


if __name__ == "__main__":
    print("\n".join(fetch(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_DIR)))
