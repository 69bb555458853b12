"""Fetches the rdma-core source release the EFA encoders are cross-checked against (Debian's
orig tarball of rdma-core 56.1, pinned by address and SHA-256) and extracts its
``providers/efa`` headers into .cache/rdma-core/, unless they are already there. `make
rdma-core-source` runs this; crates/aboleth-abi/tests/efa_crosscheck.rs compiles
tests/c/efa_reference.c against ``providers/efa/efa_io_defs.h`` (which no Debian package installs).

    python3 crates/aboleth-abi/tests/c/fetch_rdma_core.py [DEST_DIR]   (prints the source dir)
"""

from __future__ import annotations

import hashlib
import os
import sys
import tarfile
import urllib.request

VERSION = "56.1"
URL = f"http://deb.debian.org/debian/pool/main/r/rdma-core/rdma-core_{VERSION}.orig.tar.gz"
SHA256 = "63ce7f2baa7242c2dbc76375dac957c420187dd27f8c5e148efc07971ee522a8"
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 4))
DEFAULT_DIR = os.path.join(ROOT, ".cache", "rdma-core")
WANTED = ("providers/efa/",)


def digest(path: str) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


def fetch(directory: str = DEFAULT_DIR) -> str:
    """The extracted source directory (``.../rdma-core-56.1``), downloading and checking the
    archive first when needed; raises naming the address and the digests on a mismatch."""
    source = os.path.join(directory, f"rdma-core-{VERSION}")
    marker = os.path.join(source, "providers", "efa", "efa_io_defs.h")
    if os.path.exists(marker):
        return source
    os.makedirs(directory, exist_ok=True)
    archive = os.path.join(directory, f"rdma-core_{VERSION}.orig.tar.gz")
    if not (os.path.exists(archive) and digest(archive) == SHA256):
        print(f"downloading rdma-core {VERSION}'s source (2 MB) into {archive}", file=sys.stderr)
        partial = archive + ".part"
        urllib.request.urlretrieve(URL, partial)
        found = digest(partial)
        if found != SHA256:
            os.remove(partial)
            raise RuntimeError(f"{URL} has SHA-256 {found}, not the pinned {SHA256}: refusing it")
        os.replace(partial, archive)
    prefix = f"rdma-core-{VERSION}/"
    with tarfile.open(archive) as tar:
        members = [member for member in tar.getmembers()
                   if member.name.startswith(prefix) and member.name[len(prefix):].startswith(WANTED)]
        tar.extractall(directory, members=members, filter="data")
    if not os.path.exists(marker):
        raise RuntimeError(f"{archive} has no providers/efa/efa_io_defs.h")
    return source


if __name__ == "__main__":
    print(fetch(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_DIR))
