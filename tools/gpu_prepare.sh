#!/usr/bin/env bash
# Run here, before a GPU check: copies what tools/gpu_check.sh needs and the GPU machine lacks
# (it has CUDA, CMake, ninja and PyTorch, but no GoogleTest, no Google Benchmark, no network) into
# .device/ (git-ignored), which the device run then carries:
#   run(command="bash tools/gpu_check.sh", carry=[".device"], timeout_s=480)
# .device/googletest: the GoogleTest sources (built there with -DSTALLOC_GTEST_SOURCE).
# .device/benchmark: Google Benchmark's headers, libraries and CMake package, laid out as under
#   /usr so that the package finds its files relative to itself (-Dbenchmark_DIR).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/.device
mkdir -p "$dest"

rm -rf "$dest/googletest"
if [[ ! -f /usr/src/googletest/CMakeLists.txt ]]; then
  echo "gpu_prepare: /usr/src/googletest missing (apt-get install googletest)" >&2
  exit 1
fi
cp -r /usr/src/googletest "$dest/googletest"
echo "gpu_prepare: GoogleTest sources -> .device/googletest"

rm -rf "$dest/benchmark"
arch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
libdir=/usr/lib/$arch
if [[ -d /usr/include/benchmark && -d $libdir/cmake/benchmark ]]; then
  mkdir -p "$dest/benchmark/include" "$dest/benchmark/lib/$arch/cmake"
  cp -r /usr/include/benchmark "$dest/benchmark/include/"
  cp -a "$libdir"/libbenchmark* "$dest/benchmark/lib/$arch/"
  cp -r "$libdir/cmake/benchmark" "$dest/benchmark/lib/$arch/cmake/"
  echo "gpu_prepare: Google Benchmark -> .device/benchmark (benchmark_DIR=.device/benchmark/lib/$arch/cmake/benchmark)"
else
  echo "gpu_prepare: Google Benchmark not installed here: gpu_check.sh will run no benchmarks" >&2
fi
du -sh "$dest" | sed 's/^/gpu_prepare: total /'
