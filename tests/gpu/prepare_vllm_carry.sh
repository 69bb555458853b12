#!/usr/bin/env bash
# On the CPU machine, before tests/gpu/run_vllm_contract.sh: what the GPU machine lacks for vLLM's
# Python, into target-carry/vllm/ (about 25 MB, one carry): vLLM 0.33.0's Python files with
# integrations/vllm/0001-aboleth-all2all-backend.patch applied (vllm-src.tgz; its compiled
# kernels are not included: they are built for torch 2.14, the GPU machine has torch 2.11), and
# wheels of the pure-Python and small binary packages vLLM imports that the GPU machine's image
# does not have (CPython 3.12, manylinux x86_64), downloaded with pip.
#
#   tests/gpu/prepare_vllm_carry.sh          (repository root)
set -eu -o pipefail
carry=target-carry/vllm
sdist=$(python3 integrations/vllm/fetch_source.py)
rm -rf "$carry" && mkdir -p "$carry/wheels"
work=$(mktemp -d)
tar -xzf "$sdist" -C "$work" vllm-0.33.0/vllm
(cd "$work/vllm-0.33.0" && git init -q && git apply "$OLDPWD/integrations/vllm/0001-aboleth-all2all-backend.patch")
tar -czf "$carry/vllm-src.tgz" -C "$work/vllm-0.33.0" --exclude='*.cu' --exclude='*.cuh' --exclude='*.cpp' vllm
work_source="$work/vllm-0.33.0"
platforms="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64"
python3 -m pip download -q --only-binary :all: --python-version 3.12 --implementation cp $platforms --no-deps \
    -d "$carry/wheels" "pydantic==2.14.4" "pydantic-core==2.50.5" annotated-types typing-inspection msgspec \
    cachetools cbor2 pybase64 pyzmq "openai>=2.25,<3" distro jiter sniffio partial-json-parser blake3 gguf \
    "fastapi>=0.133,<0.137" "starlette>=1.0.1" prometheus-fastapi-instrumentator orjson python-json-logger \
    setproctitle ijson "oss-harmony>=0.0.11" "xgrammar==0.2.8" "apache-tvm-ffi==0.1.11" "llguidance>=1.7,<1.8"
# Every third-party module vLLM's import chain needs must be in the image or a wheel: checked here
# from the source, not found by a failing GPU call.
python3 tests/gpu/vllm_import_closure.py "$work_source" tests/gpu/gpu_image_python_modules.txt "$carry/wheels"
rm -rf "$work"
du -sh "$carry"
