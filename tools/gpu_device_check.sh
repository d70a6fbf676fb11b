#!/usr/bin/env bash
# On the lent GPU machine (docs/gpu.md): install the carried wheels and this project into
# /tmp/site, then run the GPU tests and/or the benchmark, logs and JSON into $OUT.
#
#   bash tools/gpu_device_check.sh tests      # tests/test_gpu_runtime.py, test_gpu_ptx.py
#   bash tools/gpu_device_check.sh bench [bench_gpu arguments...]
set -uo pipefail
what=${1:-tests}
shift || true
out=${OUT:-/tmp/out}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site . \
    || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PATH=$PATH:/usr/local/cuda/bin          # ptxas, for tests/test_gpu_ptx.py
nvidia-smi -L
command -v ptxas || echo "no ptxas on PATH: test_gpu_ptx.py skips its assembling tests"
python3 -c "import llvmlite.binding as b, cuda.bindings as c; print('llvm', b.llvm_version_info, 'cuda-bindings', c.__version__)"
case $what in
    tests) python3 -m pytest tests/test_gpu_runtime.py tests/test_gpu_ptx.py -q -p no:cacheprovider \
               2>&1 | tee "$out/gpu_tests.log" ;;
    bench) python3 -m hlo_opt.tools.bench_gpu --json "$out/bench_gpu.json" "$@" \
               2>&1 | tee "$out/bench_gpu.txt" ;;
    *) echo "gpu_device_check.sh: tests or bench, not $what" >&2; exit 2 ;;
esac
