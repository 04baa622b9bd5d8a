#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# valgrind (memcheck) on the command line's no-GPU paths: help, version,
# --list, refused flags, a corrupt database, a broken template folder, and a
# compile-only run resumed from its build cache (no GPU, no NVRTC work under
# valgrind). Each must end with its usual status and no memory error or
# definite leak. Skipped (77) without valgrind. $1 is the fatune binary.
set -u
F=$1
command -v valgrind >/dev/null || { echo "valgrind not found: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export FATUNE_LIBCUDA=/nonexistent   # no GPU, even on a GPU machine
VG_ERROR=99                          # valgrind's exit status when it found something
pass=0 fail=0
Q=(--head-dim 64 --dtype fp16 --mask none --arch sm_80 --seqlen 512)

# vg STATUS args...: fatune under memcheck must exit with STATUS.
vg() {
  local want=$1 rc; shift
  valgrind -q --error-exitcode=$VG_ERROR --leak-check=full --errors-for-leak-kinds=definite,indirect \
    --log-file="$tmp/vg.log" "$F" "$@" >/dev/null 2>"$tmp/err"; rc=$?
  if [ "$rc" -eq "$want" ] && [ ! -s "$tmp/vg.log" ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    printf 'FAIL: fatune %s: status %d, want %d\n' "$*" "$rc" "$want"
    head -n 40 "$tmp/vg.log" "$tmp/err"
  fi
}

vg 0 --help
vg 0 --version
vg 0 --list "${Q[@]}"
vg 2 --seqlen 0
vg 2 --frobnicate
vg 2 --head-dim 64,,96
vg 2 --dtype fp8 --mask none
vg 2 --gpu 0 --gpu 1
vg 2 --db ""
printf 'not a database\n%.0s' {1..64} >"$tmp/corrupt.db"
vg 2 "${Q[@]}" --db "$tmp/corrupt.db"
mkdir -p "$tmp/tpl/generator" "$tmp/tpl/templates"
echo "error('broken on purpose')" >"$tmp/tpl/generator/space.lua"
vg 1 --templates "$tmp/tpl" --list
# Fill the build cache natively, then resume it under valgrind.
"$F" "${Q[@]}" --db "$tmp/cache.db" >/dev/null 2>&1
vg 3 "${Q[@]}" --db "$tmp/cache.db"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
