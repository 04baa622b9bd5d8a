#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The reliability checks beyond the main suite (issue 6), run by CI after
# scripts/test.sh: the CPU test suite built with AddressSanitizer and
# UndefinedBehaviorSanitizer (every finding fails the run), libFuzzer runs of
# the command-line parser, the table importer and the runtime's problem
# validator (fat_attention_check) for a bounded time each
# from the corpus kept in fuzz/corpus, and valgrind on the command line's
# no-GPU paths. Prints the numbers: sanitizer runs and findings, fuzzing time
# and executions.
#   FATUNE_FUZZ_SECONDS   seconds per fuzz target (default 60)
#   FATUNE_EXTRA_BUILD    build folder prefix (default build-extra)
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FATUNE_FUZZ_SECONDS:-60}
B=${FATUNE_EXTRA_BUILD:-build-extra}
FATUNE_EXTRA_PACKAGES="clang valgrind libclang-rt-14-dev" scripts/install-deps.sh || \
  FATUNE_EXTRA_PACKAGES="clang valgrind" scripts/install-deps.sh
jobs=$(nproc)
LUA=$(find /usr/lib -name liblua5.4.a | head -n 1)
SQLITE=$(find /usr/lib -name libsqlite3.a | head -n 1)
fail=0

echo "== sanitizers: ASan + UBSan build of the CPU test suite"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
cmake -S . -B "$B-asan" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="$SAN" \
  -DCMAKE_EXE_LINKER_FLAGS="$SAN" -DCMAKE_SHARED_LINKER_FLAGS="$SAN" >/dev/null
cmake --build "$B-asan" -j"$jobs" >/dev/null
# The worker re-execs the binary; LSan cannot follow a process that dies of
# an injected fault, and the GPU tests skip here anyway. The valgrind test
# is run below against the plain build. test_install builds an outside
# consumer program against the installed (here: instrumented) library; the
# consumer is not built with ASan, so the runtime cannot come first: it is a
# packaging test and runs in the plain suite. test_sass_winners reads the
# shipped winners' machine code with cuobjdump and Python, running none of
# fatune's C (the table database it reads is built here by the
# instrumented build_tables all the same): the plain suite runs it, and
# here it took 200 s of nvdisasm for nothing the sanitizers could see.
# intercept_tls_get_addr=0: with it on (the default), LeakSanitizer's
# stop-the-world tracer crashed ("Tracer caught signal 11") at the exit of
# a tuner that had loaded NVRTC (dlopen, dynamic TLS), in test_concurrent
# or test_crash, in each of three full runs of this suite (two by hand, one
# rehearsal of CI); in four runs with it off, never. Off, LSan no longer
# follows dlopen'ed libraries' dynamic TLS blocks: fatune keeps nothing in
# thread-local storage, so its own leaks are found as before.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=86:intercept_tls_get_addr=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
FINDING='ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:'
TRACER_CRASH='LeakSanitizer has encountered a fatal error'
# What a failing test printed (ctest writes it after the test's status line,
# up to the next test's), so that CI's log says why and not only which.
failed_output() {
  awk '/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: /{show = ($0 ~ /\*\*\*(Failed|Timeout|Exception)/)}
       /^[0-9]+% tests passed/{show = 0} /^ +Start +[0-9]+: /{next} show' "$1"
}
# The failed tests of log $1 whose output does not show LeakSanitizer's
# tracer crash, one name a line.
failed_otherwise() {
  awk -v crash="$TRACER_CRASH" '
    function done() { if (name != "" && !crashed) print name; name = "" }
    /^ *[0-9]+\/[0-9]+ Test +#[0-9]+: /{done(); if ($0 ~ /\*\*\*(Failed|Timeout|Exception)/) {name = $4; crashed = 0}}
    /^[0-9]+% tests passed/{done()}
    index($0, crash) {crashed = 1}
    END {done()}' "$1"
}
san_log="$B-asan/ctest.log"
rm -f "$B-asan/ctest-rerun.log"
if ctest --test-dir "$B-asan" -LE slow -E 'test_valgrind|test_install|test_sass_winners' --output-on-failure -j"$jobs" \
     >"$san_log" 2>&1; then
  san_result="passed"
elif ! grep -qE "$FINDING" "$san_log" && [ -z "$(failed_otherwise "$san_log")" ]; then
  # LeakSanitizer's stop-the-world tracer itself sometimes crashes as a
  # process exits ("Tracer caught signal 11", then "LeakSanitizer has
  # encountered a fatal error"; google/sanitizers#1353): no finding, the
  # test's own checks passed. Where that is every failure, the failed
  # tests run once more; a finding or any other failure is never rerun.
  failed_output "$san_log" | tail -n 60
  echo "LeakSanitizer's tracer crashed in $(failed_output "$san_log" | grep -c "$TRACER_CRASH") processes, no finding: the failed tests once more"
  san_log="$B-asan/ctest-rerun.log"
  if ctest --test-dir "$B-asan" --rerun-failed --output-on-failure >"$san_log" 2>&1; then
    san_result="passed (on the rerun of tests whose only fault was LeakSanitizer's tracer crash)"
  else
    san_result="FAILED"; fail=1
  fi
else
  san_result="FAILED"; fail=1
fi
findings=$(cat "$B-asan/ctest.log" "$B-asan/ctest-rerun.log" 2>/dev/null | grep -cE "$FINDING" || true)
failed_output "$san_log" | tail -n 200
tail -n 15 "$san_log"
echo "sanitizer run: $san_result, $findings findings"

echo "== fuzzing: libFuzzer, $FUZZ_SECONDS s per target"
FZ="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -g"
CC=clang cmake -S . -B "$B-fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$FZ" >/dev/null
cmake --build "$B-fuzz" -j"$jobs" --target fatune_tuner fatune_static >/dev/null
total_execs=0
for target in fuzz/fuzz_*.c; do
  name=$(basename "$target" .c)
  # A target of the public API (it includes fatune.h) links the static
  # libfatune, which carries its own copy of core; the others link the
  # tuner's library, core and Lua.
  if grep -q '#include "fatune.h"' "$target"; then
    libs=("$B-fuzz/runtime/libfatune.a" "$SQLITE")
  else
    libs=("$B-fuzz/tuner/libfatune_tuner.a" "$B-fuzz/core/libfatune_core.a" "$LUA" "$SQLITE")
  fi
  clang -fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer -g -D_GNU_SOURCE \
    -Icore -Ituner -Ituner/generate -Ituner/measure -Ituner/tables -Ituner/report -Itemplates -Iinclude -I"${CUDA_ROOT:-/usr/local/cuda}/include" -I/usr/include/lua5.4 \
    "$target" "${libs[@]}" -lz -lpthread -ldl -lm -o "$B-fuzz/$name"
  corpus=fuzz/corpus/$name
  mkdir -p "$corpus" "$B-fuzz/$name.new"
  # New inputs go to a scratch folder; the kept corpus changes only by commit.
  if (cd "$B-fuzz" && "./$name" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 "$name.new" "$OLDPWD/$corpus") >"$B-fuzz/$name.log" 2>&1; then
    res=passed
  else
    res=FAILED; fail=1; tail -n 40 "$B-fuzz/$name.log"
  fi
  execs=$(grep -m1 -oE 'stat::number_of_executed_units: *[0-9]+' "$B-fuzz/$name.log" | grep -oE '[0-9]+$' || echo 0)
  total_execs=$((total_execs + execs))
  echo "fuzz $name: $res, $FUZZ_SECONDS s, $execs executions"
done
echo "fuzzing: $total_execs executions in all"

echo "== valgrind: the command line's no-GPU paths"
if bash tests/test_valgrind.sh build/fatune; then echo "valgrind: clean"; else echo "valgrind: FAILED"; fail=1; fi
exit "$fail"
