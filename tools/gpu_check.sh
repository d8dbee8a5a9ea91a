#!/usr/bin/env bash
# The checks that need a GPU, in one run of under 8 minutes on the device machine (CUDA 13, CMake,
# ninja, PyTorch; no GoogleTest, no Google Benchmark, no network). Prepare here first with
# tools/gpu_prepare.sh, then: run(command="bash tools/gpu_check.sh", carry=[".device"], timeout_s=480).
#
# Everything lands in ${OUT:-/tmp/gpu_check}/ (at most 8 files come back from a device run):
#   summary.log   each section's result, environment, vmm-demo output
#   build.log     configure and build output
#   vmm_tests.log the VMM conformance suite with STALLOC_REQUIRE_CUDA=1 (cuda must run)
#   bench_vmm.txt                    cost per chunk of each VMM call on the cuda backend
#   bench_vmm_busy.txt               the same for map / set_access / unmap while kernels run
#   replay_cuda.json                 a generator preset replayed through the runtime on the GPU
#   torch.jsonl                      one line per allocator (stalloc, default, expandable,
#                                    stalloc_auto): peaks, utilization, iteration time, losses,
#                                    plan installs/failures/matches, the user-facing checks
# Exit status: the number of failed sections (0: all passed).
#
# Sections are independent: one that fails is recorded and the next runs. Later checks add a
# section below the last one, using section/fail/pass and the time budget.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/gpu_check}
build=${STALLOC_GPU_BUILD:-/tmp/stalloc-gpu-build}
device_deps=$root/.device
mkdir -p "$out"
summary=$out/summary.log
: >"$summary"
failures=0
started=$(date +%s)

log() { echo "$*" | tee -a "$summary"; }
section() { log ""; log "== $* (t=$(($(date +%s) - started))s)"; }
fail() { log "FAIL: $*"; failures=$((failures + 1)); }
pass() { log "PASS: $*"; }
# The device machine gives 600 s per command and about 15 minutes in all, start-up included:
# a section starts only if it can run to its own timeout within 450 s of the script's start;
# otherwise it is skipped (and says so). Sections run most important first.
budget_s=${STALLOC_GPU_BUDGET_S:-450}
within_budget() {  # $1: the section's timeout in seconds
  local elapsed=$(($(date +%s) - started))
  if ((elapsed + $1 > budget_s)); then
    log "SKIPPED: ${elapsed}s elapsed + ${1}s timeout > budget ${budget_s}s"
    return 1
  fi
}
# A run killed by its timeout keeps what it printed.
export PYTHONUNBUFFERED=1

# ---------------------------------------------------------------------------------------------
section "environment"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  uname -r  # the sandbox (gVisor or a VM) shapes what VMM calls cost
  echo "max_map_count=$(cat /proc/sys/vm/max_map_count)"
  cmake --version | head -1
  ls /usr/local/cuda/include/cuda.h 2>&1
  nproc
} | tee -a "$summary"

# ---------------------------------------------------------------------------------------------
section "build (CUDA backend compiled in)"
# Warnings are CI's business: another compiler's new warning must not stop a GPU check.
configure=(-S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTALLOC_WERROR=OFF)
command -v ccache >/dev/null && configure+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
targets=(stalloc stalloc_torch)
if [[ -f $device_deps/googletest/CMakeLists.txt ]]; then
  configure+=(-DSTALLOC_GTEST_SOURCE="$device_deps/googletest")
  targets+=(vmm_tests)
else
  # The rest still builds and runs; the conformance section then fails for want of its tests.
  log "no .device/googletest: run tools/gpu_prepare.sh here and carry .device"
  configure+=(-DSTALLOC_BUILD_TESTS=OFF)
fi
benchmark_dir=$(find "$device_deps/benchmark" -name benchmarkConfig.cmake -printf '%h\n' 2>/dev/null | head -1)
[[ -n $benchmark_dir ]] && configure+=(-Dbenchmark_DIR="$benchmark_dir")
[[ -n $benchmark_dir ]] && targets+=(bench_vmm)
if cmake "${configure[@]}" >"$out/build.log" 2>&1 &&
  timeout 300 cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >>"$out/build.log" 2>&1; then
  if grep -q "CUDA VMM backend compiled in" "$out/build.log"; then
    pass "built ${targets[*]} in $build"
  else
    fail "cuda.h not found: the CUDA backend is compiled out (see build.log)"
  fi
else
  fail "build (tail of build.log follows)"
  tail -30 "$out/build.log" | tee -a "$summary"
fi

# ---------------------------------------------------------------------------------------------
section "VMM conformance suite, cuda instances"
# The cuda instances only: the host backend's own tests count the process's memory areas, which
# CUDA's threads (and a sandbox) change; CI runs those.
if [[ -x $build/bin/vmm_tests ]]; then
  STALLOC_REQUIRE_CUDA=1 timeout 120 "$build/bin/vmm_tests" --gtest_filter='*/cuda' >"$out/vmm_tests.log" 2>&1
  rc=$?
  cuda_ok=$(grep -c '^\[       OK \] .*/cuda ' "$out/vmm_tests.log")
  cuda_skipped=$(grep -c '^\[  SKIPPED \] .*/cuda' "$out/vmm_tests.log")
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/vmm_tests.log" | tee -a "$summary"
  if ((rc == 0 && cuda_ok > 0 && cuda_skipped == 0)); then
    pass "vmm_tests: $cuda_ok cuda cases passed"
  else
    fail "vmm_tests: exit $rc, $cuda_ok cuda cases passed, $cuda_skipped skipped"
  fi
else
  fail "vmm_tests was not built"
fi

# ---------------------------------------------------------------------------------------------
section "stalloc vmm-demo --backend cuda"
if [[ -x $build/bin/stalloc ]] && timeout 60 "$build/bin/stalloc" vmm-demo --backend cuda >>"$summary" 2>&1; then
  pass "vmm-demo on cuda"
else
  fail "vmm-demo on cuda"
fi

# ---------------------------------------------------------------------------------------------
section "PyTorch training: default allocator, expandable segments, stalloc"
# Each allocator in its own process: PyTorch fixes its allocator before the first CUDA tensor.
if [[ -f $build/lib/libstalloc_torch.so ]] && python3 -c "import torch; assert torch.cuda.is_available()" 2>>"$summary"; then
  rm -f /tmp/torch_*.json
  # name, allocator, extra arguments: stalloc twice, with the default varying_sizes and auto;
  # stalloc first, so that a short budget still measures it.
  for run in "stalloc stalloc" "default default" "expandable expandable" \
    "stalloc_auto stalloc --stalloc-conf backend:cuda,mode:alias,varying_sizes:auto"; do
    read -r name allocator extra <<<"$run"
    within_budget 120 || break
    # shellcheck disable=SC2086
    if STALLOC_LIBRARY=$build/lib/libstalloc_torch.so timeout 120 python3 "$root/tools/gpu_torch_compare.py" \
      --allocator "$allocator" $extra --json "/tmp/torch_$name.json" >>"$summary" 2>&1; then
      python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); r["run"] = sys.argv[2]; print(json.dumps(r))' \
        "/tmp/torch_$name.json" "$name" >>"$out/torch.jsonl"
      pass "torch training under $name"
      # Equal losses alone pass a run that never planned: stalloc must have installed a plan,
      # had none fail, and served requests from it; and every allocator must pass the checks a
      # user's program leans on (an empty tensor, torch.cuda.memory_stats(), a caught
      # out-of-memory error, and under stalloc a refused graph capture).
      if python3 - "/tmp/torch_$name.json" "$allocator" >>"$summary" 2>&1 <<'PY'; then
import json, sys
r, allocator = json.load(open(sys.argv[1])), sys.argv[2]
problems = [f"check {k} failed: {r['check_notes'][k]}" for k, ok in r["checks"].items() if not ok]
if allocator == "stalloc":
    if r["plan_installs"] <= 0: problems.append("no plan installed")
    if r["plan_failures"] != 0: problems.append(f"{r['plan_failures']} plan failures: {r['last_plan_error']}")
    if r["matches"] <= 0: problems.append("no request matched a plan")
    print(f"plan_installs {r['plan_installs']}, plan_failures {r['plan_failures']}, matches {r['matches']}, "
          f"misses {r['misses']}, out-of-memory error {r['integration']['out_of_memory_error']}")
for name, note in r["check_notes"].items():
    print(f"  {name}: {'ok' if r['checks'][name] else 'FAILED'}: {note}")
print("\n".join(problems))
sys.exit(1 if problems else 0)
PY
        pass "plans and checks under $name"
      else
        fail "plans or checks under $name (see summary.log)"
      fi
    else
      fail "torch training under $name"
    fi
  done
  # Same seed, weights and tokens: a stalloc run whose tensors shared memory while both were live
  # trains on corrupted values. bf16 kernels are not bit-exact from run to run, hence a tolerance.
  if [[ -f /tmp/torch_default.json ]]; then
    for name in stalloc stalloc_auto; do
      [[ -f /tmp/torch_$name.json ]] || continue
      if python3 - "/tmp/torch_default.json" "/tmp/torch_$name.json" >>"$summary" 2>&1 <<'PY'; then
import json, math, sys
base, run = (json.load(open(p))["losses"] for p in sys.argv[1:3])
worst = max(abs(a - b) for a, b in zip(base, run))
ok = len(base) == len(run) and all(math.isfinite(x) for x in run) and worst <= 0.05
print(f"losses against the default allocator's: {len(run)} iterations, largest difference {worst:.4f}")
sys.exit(0 if ok else 1)
PY
        pass "losses under $name match the default allocator's"
      else
        fail "losses under $name differ from the default allocator's"
      fi
    done
  fi
else
  fail "no libstalloc_torch.so or no CUDA-enabled torch"
fi

# ---------------------------------------------------------------------------------------------
section "replay a generator preset through the runtime on the cuda backend"
# Four layers of the preset: --verify copies about three 64-byte lines per MiB allocated to and
# from the GPU synchronously (1 million lines here), and the full preset maps 2.8 million times.
if [[ -x $build/bin/stalloc ]] && within_budget 150; then
  "$build/bin/stalloc" gen --preset llama7b-tp2pp2-r --layers 4 -o /tmp/stalloc-preset.trace >>"$summary" 2>&1
  if timeout 150 "$build/bin/stalloc" replay /tmp/stalloc-preset.trace --backend cuda --verify --json \
    >"$out/replay_cuda.json" 2>>"$summary"; then
    tee -a "$summary" <"$out/replay_cuda.json"
    pass "replay on cuda"
  else
    fail "replay on cuda (see summary.log)"
  fi
elif [[ ! -x $build/bin/stalloc ]]; then
  fail "stalloc was not built"
fi

# ---------------------------------------------------------------------------------------------
# bench_vmm on the benchmarks FILTER names, 3 repetitions within TIMEOUT seconds, into FILE.
run_bench() {  # $1: filter, $2: file under $out, $3: timeout, $4: what it is
  if [[ ! -x $build/bin/bench_vmm ]]; then
    fail "bench_vmm was not built (no Google Benchmark in .device/benchmark?)"
    return
  fi
  within_budget "$3" || return
  timeout "$3" "$build/bin/bench_vmm" --benchmark_filter="$1" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true >"$out/$2" 2>&1
  local rc=$?
  grep -E 'median|ERROR' "$out/$2" | tee -a "$summary"
  if ((rc == 0)) && ! grep -q 'ERROR OCCURRED' "$out/$2"; then
    pass "$4"
  else
    fail "$4: exit $rc (see $2)"
  fi
}

section "VMM call costs on the cuda backend (bench_vmm, 3 repetitions)"
run_bench '/cuda/' bench_vmm.txt 120 "bench_vmm cuda"

# ---------------------------------------------------------------------------------------------
section "VMM call costs while kernels run (bench_vmm BM_VmmCallWhileBusy, 3 repetitions)"
# Memsets of a 1 GiB buffer keep the GPU busy while map / set_access / unmap are timed
# (bench/busy_gpu.h); busy_at_end near 1 says the load covered the timed batches.
run_bench '/cuda_busy/' bench_vmm_busy.txt 90 "bench_vmm cuda while busy"

# ---------------------------------------------------------------------------------------------
section "done: $failures failed section(s)"
exit "$failures"
