"""Fetches the source distribution of the vLLM release the patch is made against (pinned by
version, address and SHA-256) into .cache/vllm/, unless it is already there and intact. `make
vllm-source` runs this; python/tests/test_vllm_integration.py applies the patch to it, and the
GPU machine's contract test loads vLLM's Python files from it.

    python3 integrations/vllm/fetch_source.py [DEST_DIR]      (prints the archive's path)
"""

from __future__ import annotations

import hashlib
import os
import sys
import urllib.request

VLLM_VERSION = "0.33.0"
URL = ("https://files.pythonhosted.org/packages/f7/25/aa5684e9c59d6fc75f78926b7f15e8d9adc7de2d9e6e7575b80776ad8169/"
       f"vllm-{VLLM_VERSION}.tar.gz")
SHA256 = "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_DIR = os.path.join(ROOT, ".cache", "vllm")


def digest(path: str) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


def fetch(directory: str = DEFAULT_DIR) -> str:
    """The archive's path, downloaded first when missing or corrupt; raises naming the address
    and the digests when what arrives is not the pinned release."""
    path = os.path.join(directory, f"vllm-{VLLM_VERSION}.tar.gz")
    if os.path.exists(path) and digest(path) == SHA256:
        return path
    os.makedirs(directory, exist_ok=True)
    print(f"downloading vLLM {VLLM_VERSION}'s source distribution (47 MB) into {path}", file=sys.stderr)
    partial = path + ".part"
    urllib.request.urlretrieve(URL, partial)
    found = digest(partial)
    if found != SHA256:
        os.remove(partial)
        raise RuntimeError(f"{URL} has SHA-256 {found}, not the pinned {SHA256}: refusing it")
    os.replace(partial, path)
    return path


if __name__ == "__main__":
    print(fetch(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_DIR))
