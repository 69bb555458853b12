"""Do GPU system-scope atomics on host-pinned memory work on this machine? The proxy's shared
rings (several programs posting to one peer) and the library-style baseline reserve ring slots
with `atom.relaxed.sys.global.add.u64` and raise the producer head with `atom.release.sys.max`
on the ring header, which lives in host-pinned memory.

    python3 tests/gpu/host_atomics.py [OUT_DIR]

Thread 0 adds 1 to a host-pinned word 1000 times (keeping each old value), then takes the
max of another word with 1..1000. Passes when the old values are 0..999 and the words end at
1000 and 1000; also reports the device's host-native-atomics attribute. Writes
OUT_DIR/host_atomics.json.
"""

import json
import os
import sys

import torch
import triton
import triton.language as tl

COUNT = 1000


@triton.jit
def hammer(host_words, olds, COUNT: tl.constexpr):
    pointer = host_words.to(tl.pointer_type(tl.int64))
    for i in range(COUNT):
        old = tl.inline_asm_elementwise(
            "{ .reg .pred %p; .reg .u32 %t; mov.u32 %t, %tid.x; setp.eq.u32 %p, %t, 0; mov.u64 $0, 0; "
            "@%p atom.relaxed.sys.global.add.u64 $0, [$1], 1; }", "=l,l", [pointer.to(tl.int64, bitcast=True)],
            dtype=tl.int64, is_pure=False, pack=1)
        tl.store(olds + i, old)  # a scalar store: Triton stores thread 0's value
        tl.inline_asm_elementwise(
            "{ .reg .pred %p; .reg .u32 %t; .reg .u64 %o; mov.u32 %t, %tid.x; setp.eq.u32 %p, %t, 0; "
            "@%p atom.release.sys.global.max.u64 %o, [$1], $2; mov.u32 $0, 0; }", "=r,l,l",
            [(pointer + 1).to(tl.int64, bitcast=True), (i + 1).to(tl.int64)],
            dtype=tl.int32, is_pure=False, pack=1)


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
    words = torch.zeros(2, dtype=torch.int64, pin_memory=True)
    olds = torch.full((COUNT,), -1, dtype=torch.int64, device="cuda")
    hammer[(1,)](words.data_ptr(), olds, COUNT=COUNT, num_warps=1)
    torch.cuda.synchronize()
    seen = olds.cpu().tolist()
    attribute = None
    try:
        from cuda.bindings import runtime  # optional
        attribute = runtime.cudaDeviceGetAttribute(runtime.cudaDeviceAttr.cudaDevAttrHostNativeAtomicSupported, 0)[1]
    except Exception as error:  # noqa: BLE001 - report what could not be read
        attribute = f"unavailable: {error}"
    report = {
        "add_old_values_are_0_to_999": seen == list(range(COUNT)),
        "first_old_values": seen[:8],
        "final_words": words.tolist(),
        "host_native_atomic_supported": attribute,
    }
    report["passed"] = report["add_old_values_are_0_to_999"] and words.tolist() == [COUNT, COUNT]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "host_atomics.json"), "w") as file:
        json.dump(report, file, indent=1)
    print(json.dumps(report), flush=True)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
