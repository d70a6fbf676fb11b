#!/usr/bin/env bash
# Download, on a machine with internet, the wheels the lent GPU machine lacks (it has no
# internet; Python 3.12, x86-64; docs/gpu.md says how a `run` call installs and uses them).
#
#   tools/gpu_device_wheels.sh             # into .whl/ and .whl-egglog/ (git-ignored)
#   WHEEL_DIR=/tmp/w tools/gpu_device_wheels.sh      # into /tmp/w and /tmp/w-egglog
#
# The image there has numpy, ml_dtypes, cuda-bindings, jax with CUDA, pytest, hypothesis,
# click, packaging, cloudpickle, typing-extensions and setuptools. It lacks lark and
# lark-cython (the parser), llvmlite at the version this project is tested with (LLVM 22's
# NVPTX backend), and egglog with what it imports (graphviz, opentelemetry-api, black with
# platformdirs and pytokens). A call carries at most 64 MiB: llvmlite (57 MiB) and egglog
# (46 MiB) cannot travel together, so egglog, needed only by hlo_opt.optimize, gets a
# folder of its own. Versions are those of the development environment.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
dir=${WHEEL_DIR:-$root/.whl}
if [ -z "${WHEEL_DIR:-}" ]; then
    exclude=$(git rev-parse --git-path info/exclude)
    for d in /.whl/ /.whl-egglog/; do
        grep -qx "$d" "$exclude" 2>/dev/null || echo "$d" >> "$exclude"
    done
fi
download() {            # download FOLDER NAME==VERSION...
    local to=$1
    shift
    mkdir -p "$to"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$to" "$@"
    du -sh "$to"
}
download "$dir" llvmlite==0.50.0 lark==1.3.1 lark-cython==0.0.17
download "$dir-egglog" egglog==13.2.0 graphviz==0.21 opentelemetry-api==1.45.2 \
    black==26.10.1 platformdirs==4.14.7 pytokens==0.4.1
