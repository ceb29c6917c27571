#!/usr/bin/env bash
# CUDA tests on the GPU machine (one H200): builds the cuda-release preset unless a build is
# already there, runs the `cuda` CTest label, then compute-sanitizer memcheck and racecheck
# on microllm_cuda_tests. Logs and a Markdown summary go to $OUT (./out when unset); the
# summary is printed last. Every step runs and is reported even when an earlier one fails
# (a failed build stops only the steps that need it); the exit status is 1 if anything failed.
#
#   OUT=/tmp/out MICROLLM_GIT_COMMIT=$(git rev-parse HEAD) MICROLLM_GIT_DIRTY=0 scripts/gpu/test.sh
#
# Settings (environment):
#   STEPS              steps to run, of "ctest memcheck racecheck" (all by default)
#   BUILD_DIR          build tree (build/cuda-release)
#   TEST_BIN           the CUDA test binary ($BUILD_DIR/tests/microllm_cuda_tests)
#   MEMCHECK_FILTER    gtest filter for memcheck ('*:-*Large*:*OutOfMemory*': every test but
#                      the large ones and the one whose failing cudaMalloc is intended)
#   RACECHECK_FILTER   gtest filter for racecheck (tests of kernels that use shared memory)
#   CTEST_JOBS         tests run at once by ctest (4); CTEST_TIMEOUT seconds per test (120)
#   TESTS_TIMEOUT      seconds for the whole ctest (or direct) run (300)
#   MEMCHECK_TIMEOUT, RACECHECK_TIMEOUT   seconds for each sanitizer run (240, 180)
#   TIME_BUDGET        seconds for the whole script (570: a device call may run 600); each
#                      step's limit is cut to what is left, so the summary always prints
#   MICROLLM_GIT_COMMIT, MICROLLM_GIT_DIRTY   the provenance (wins over a .git in the tree)
set -uo pipefail

OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1

STEPS=${STEPS:-"ctest memcheck racecheck"}
BUILD_DIR=${BUILD_DIR:-build/cuda-release}
TEST_BIN=${TEST_BIN:-$BUILD_DIR/tests/microllm_cuda_tests}
MEMCHECK_FILTER=${MEMCHECK_FILTER:-'*:-*Large*:*OutOfMemory*'}
RACECHECK_FILTER=${RACECHECK_FILTER:-'*Softmax*:*RmsNorm*:*Reduce*:*Attention*:*CrossEntropy*:-*Large*'}
CTEST_JOBS=${CTEST_JOBS:-4}
CTEST_TIMEOUT=${CTEST_TIMEOUT:-120}
TESTS_TIMEOUT=${TESTS_TIMEOUT:-300}
MEMCHECK_TIMEOUT=${MEMCHECK_TIMEOUT:-240}
RACECHECK_TIMEOUT=${RACECHECK_TIMEOUT:-180}
TIME_BUDGET=${TIME_BUDGET:-570}
JOBS=$(nproc)
start=$(date +%s)
failed=0

log() { echo "[gpu/test $(($(date +%s) - start)) s] $*"; }
want() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
# The last value a sed expression captures from a file, or "n/a".
number() { local v; v=$(sed -n "$1" "$2" 2>/dev/null | tail -n 1); echo "${v:-n/a}"; }
count() { grep -Ec "$1" "$2" 2>/dev/null; }
# limit_for SECONDS: SECONDS, or less when the time budget (minus 20 s for the summary) is short.
limit_for() {
  local left=$((TIME_BUDGET - ($(date +%s) - start) - 20))
  if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}
rc_text() {
  case "$1" in
    124 | 137) echo "$1 (timed out)" ;;
    *) echo "$1" ;;
  esac
}

# ---- provenance ----------------------------------------------------------------------------
# Stated provenance wins: the GPU machine's copy of the tree may carry a stale .git.
if [ -n "${MICROLLM_GIT_COMMIT:-}" ]; then
  commit=$MICROLLM_GIT_COMMIT
  case "${MICROLLM_GIT_DIRTY:-unknown}" in
    0 | false | no) dirty=false ;;
    1 | true | yes) dirty=true ;;
    *) dirty=unknown ;;
  esac
  commit_source="MICROLLM_GIT_COMMIT"
elif git -C "$ROOT" rev-parse HEAD >/dev/null 2>&1; then
  commit=$(git -C "$ROOT" rev-parse HEAD)
  if [ -n "$(git -C "$ROOT" status --porcelain -- . ':(exclude)bench/records' 2>/dev/null)" ]; then
    dirty=true
  else
    dirty=false
  fi
  commit_source="git"
else
  commit=unknown
  dirty=unknown
  commit_source="unknown (no .git, no MICROLLM_GIT_COMMIT)"
fi
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
gpu=${gpu:-"no nvidia-smi"}

# ---- build ---------------------------------------------------------------------------------
build_status="prebuilt ($TEST_BIN)"
build_rc=0
if [ ! -x "$TEST_BIN" ]; then
  nvcc_path=${CUDA_COMPILER:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  log "no $TEST_BIN: configuring and building the cuda-release preset with $JOBS jobs ($nvcc_path)"
  {
    cmake --preset cuda-release -DCMAKE_CUDA_COMPILER="$nvcc_path" &&
      cmake --build --preset cuda-release -j "$JOBS"
  } >"$OUT/build.log" 2>&1
  build_rc=$?
  if [ "$build_rc" -eq 0 ] && [ -x "$TEST_BIN" ]; then
    build_status="built ($(($(date +%s) - start)) s, log build.log)"
  else
    build_status="FAILED (exit $build_rc, log build.log)"
    [ "$build_rc" -eq 0 ] && build_rc=1
    failed=1
    tail -n 30 "$OUT/build.log"
  fi
fi
log "build: $build_status"

# CTest files hold absolute paths: a tree built elsewhere (carried from another machine)
# cannot run through ctest, so the test binary is then run directly.
cache_home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null)
if [ "$cache_home" = "$ROOT" ] || [ "$cache_home" = "$(pwd -P)" ]; then
  ctest_mode="ctest"
else
  ctest_mode="direct"
fi

# ---- ctest -L cuda -------------------------------------------------------------------------
skip_note=""
ctest_status="not run" ctest_rc="-" t_total="-" t_passed="-" t_failed="-" t_skipped="-"
limit=$(limit_for "$TESTS_TIMEOUT")
if want ctest && [ "$build_rc" -eq 0 ] && [ "$limit" -lt 10 ]; then
  ctest_status="FAILED (not run: TIME_BUDGET spent)"
  failed=1
elif want ctest && [ "$build_rc" -eq 0 ]; then
  if [ "$ctest_mode" = "ctest" ]; then
    log "ctest -L cuda (-j $CTEST_JOBS, $CTEST_TIMEOUT s per test, $limit s in all)"
    timeout -k 10 "$limit" ctest --test-dir "$BUILD_DIR" -L cuda --output-on-failure -j "$CTEST_JOBS" \
      --timeout "$CTEST_TIMEOUT" >"$OUT/ctest.log" 2>&1
    ctest_rc=$?
    t_total=$(number 's/.*tests failed out of \([0-9][0-9]*\).*/\1/p' "$OUT/ctest.log")
    t_passed=$(count 'Test +#[0-9]+: .* Passed' "$OUT/ctest.log")
    t_skipped=$(count '\*\*\*Skipped' "$OUT/ctest.log")
    if [ "$t_total" = "n/a" ]; then
      t_failed="n/a"
      ctest_status="FAILED (no test summary; see ctest.log)"
    else
      t_failed=$((t_total - t_passed - t_skipped))
      ctest_status="ctest -L cuda"
    fi
    grep -q "No tests were found" "$OUT/ctest.log" && ctest_status="FAILED (no tests labelled cuda)"
  else
    log "build tree configured at '${cache_home:-?}', not '$ROOT': running $TEST_BIN directly"
    timeout -k 10 "$limit" "$TEST_BIN" >"$OUT/ctest.log" 2>&1
    ctest_rc=$?
    t_passed=$(number 's/^\[  PASSED  \] \([0-9][0-9]*\) test.*/\1/p' "$OUT/ctest.log")
    t_skipped=$(number 's/^\[  SKIPPED \] \([0-9][0-9]*\) test.*/\1/p' "$OUT/ctest.log")
    t_failed=$(number 's/^\[  FAILED  \] \([0-9][0-9]*\) test.*/\1/p' "$OUT/ctest.log")
    [ "$t_skipped" = "n/a" ] && t_skipped=0
    [ "$t_failed" = "n/a" ] && t_failed=0
    t_total=$(number 's/^\[==========\] \([0-9][0-9]*\) tests\{0,1\} from .* ran.*/\1/p' "$OUT/ctest.log")
    ctest_status="direct run of microllm_cuda_tests (build tree configured at ${cache_home:-an unknown path})"
  fi
  if [ "$ctest_rc" -ne 0 ] || [ "$t_failed" != "0" ] || [ "${ctest_status%% *}" = "FAILED" ]; then
    failed=1
    case "$ctest_status" in FAILED*) ;; *) ctest_status="FAILED: $ctest_status" ;; esac
  fi
  # On a GPU machine a skipped CUDA test usually means CUDA was unusable: say so.
  if [ "$t_skipped" != "0" ] && [ "$t_skipped" != "-" ] && nvidia-smi -L >/dev/null 2>&1; then
    skip_note="$t_skipped tests skipped although nvidia-smi sees a GPU: check the skip reasons in ctest.log"
  fi
  log "ctest: $ctest_status, exit $(rc_text "$ctest_rc"): $t_passed passed, $t_failed failed, $t_skipped skipped of $t_total"
elif want ctest; then
  ctest_status="not run (build failed)"
fi

# ---- compute-sanitizer ---------------------------------------------------------------------
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

# run_sanitizer TOOL FILTER TIMEOUT LOG → sets s_status s_rc s_errors s_tests_failed s_tests_passed
run_sanitizer() {
  local tool=$1 filter=$2 limit=$3 logfile=$4
  s_rc="-" s_errors="-" s_tests_failed="-" s_tests_passed="-"
  if [ "$build_rc" -ne 0 ]; then
    s_status="not run (build failed)"
    return
  fi
  if [ ! -x "$sanitizer" ]; then
    s_status="FAILED (compute-sanitizer not found)"
    failed=1
    return
  fi
  limit=$(limit_for "$limit")
  if [ "$limit" -lt 10 ]; then
    s_status="FAILED (not run: TIME_BUDGET spent)"
    failed=1
    return
  fi
  log "compute-sanitizer --tool $tool, filter '$filter', limit $limit s"
  # MICROLLM_CUDA_SYNC_CHECK=1: a fault surfaces at the launch that caused it.
  MICROLLM_CUDA_SYNC_CHECK=1 timeout -k 10 "$limit" "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 100 \
    "$TEST_BIN" --gtest_filter="$filter" >"$logfile" 2>&1
  s_rc=$?
  s_errors=$(number 's/.*ERROR SUMMARY: \([0-9][0-9]*\) error.*/\1/p' "$logfile")
  # racecheck ends with "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)".
  [ "$s_errors" = "n/a" ] &&
    s_errors=$(number 's/.*RACECHECK SUMMARY: .*(\([0-9][0-9]*\) error.*/\1/p' "$logfile")
  s_tests_passed=$(number 's/.*\[  PASSED  \] \([0-9][0-9]*\) test.*/\1/p' "$logfile")
  s_tests_failed=$(number 's/.*\[  FAILED  \] \([0-9][0-9]*\) test.*/\1/p' "$logfile")
  [ "$s_tests_failed" = "n/a" ] && [ "$s_tests_passed" != "n/a" ] && s_tests_failed=0
  if [ "$s_rc" -eq 0 ] && [ "$s_errors" = "0" ]; then
    s_status="clean"
  else
    s_status="FAILED"
    failed=1
  fi
  log "$tool: $s_status, exit $(rc_text "$s_rc"), $s_errors sanitizer errors, gtest $s_tests_passed passed / $s_tests_failed failed"
}

mc_status="not run" mc_rc="-" mc_errors="-" mc_passed="-" mc_failed="-"
if want memcheck; then
  run_sanitizer memcheck "$MEMCHECK_FILTER" "$MEMCHECK_TIMEOUT" "$OUT/memcheck.log"
  mc_status=$s_status mc_rc=$s_rc mc_errors=$s_errors mc_passed=$s_tests_passed mc_failed=$s_tests_failed
fi
rc_status="not run" rc_rc="-" rc_errors="-" rc_passed="-" rc_failed="-" rc_hazards="-"
if want racecheck; then
  run_sanitizer racecheck "$RACECHECK_FILTER" "$RACECHECK_TIMEOUT" "$OUT/racecheck.log"
  rc_status=$s_status rc_rc=$s_rc rc_errors=$s_errors rc_passed=$s_tests_passed rc_failed=$s_tests_failed
  [ -f "$OUT/racecheck.log" ] &&
    rc_hazards=$(number 's/.*RACECHECK SUMMARY: \([0-9][0-9]*\) hazard.*/\1/p' "$OUT/racecheck.log")
fi

# ---- summary -------------------------------------------------------------------------------
overall=$([ "$failed" -eq 0 ] && echo PASS || echo FAIL)
summary="$OUT/gpu-test-summary.md"
cat >"$summary" <<EOF
# GPU test summary: $overall

- Date (UTC): $(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - start)) s
- Commit: \`$commit\` (dirty: $dirty; from $commit_source)
- GPU: $gpu
- Build: $build_status
- Command: \`STEPS="$STEPS" scripts/gpu/test.sh\`

| step | status | exit | passed | failed | skipped | sanitizer errors | log |
|---|---|---|---|---|---|---|---|
| ctest -L cuda ($ctest_mode) | $ctest_status | $(rc_text "$ctest_rc") | $t_passed | $t_failed | $t_skipped | — | ctest.log |
| memcheck \`$MEMCHECK_FILTER\` | $mc_status | $(rc_text "$mc_rc") | $mc_passed | $mc_failed | — | $mc_errors | memcheck.log |
| racecheck \`$RACECHECK_FILTER\` | $rc_status | $(rc_text "$rc_rc") | $rc_passed | $rc_failed | — | $rc_errors (hazards: $rc_hazards) | racecheck.log |

Tests: $t_total in the \`cuda\` label. ${skip_note} Sanitizers run \`compute-sanitizer --tool <tool>
--error-exitcode 1\` on \`$TEST_BIN\` with the gtest filter shown.
EOF
echo
cat "$summary"
exit "$failed"
