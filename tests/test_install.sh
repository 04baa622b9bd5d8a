#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The install tree of libfatune: `cmake --install` into a scratch prefix must
# give the header, both libraries, the table database, a pkg-config file and
# a CMake package; a tiny consumer is then built against it with pkg-config
# (shared and static) and with find_package, and each run must find the
# installed tables on its own and select the built-in default for a GPU
# described offline.
# Usage: test_install.sh FATUNE_BIN (the build folder is its directory).
set -u -o pipefail
BUILD=$(cd "$(dirname "$1")" && pwd)
WORK=$(mktemp -d /tmp/fatune-install-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
PREFIX="$WORK/prefix"
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$BUILD" --prefix "$PREFIX" > "$WORK/install.log" 2>&1 \
  || { cat "$WORK/install.log"; fail "cmake --install"; }
LIBDIR=$(cd "$PREFIX" && ls -d lib*/libfatune.so | head -1 | xargs dirname)
for f in include/fatune.h "$LIBDIR/libfatune.so" "$LIBDIR/libfatune.a" \
         share/fatune/fatune_tables.db "$LIBDIR/pkgconfig/fatune.pc" \
         "$LIBDIR/cmake/fatune/fatuneConfig.cmake" "$LIBDIR/cmake/fatune/fatuneConfigVersion.cmake"; do
  [ -e "$PREFIX/$f" ] || fail "missing $f in the install tree"
done

cat > "$WORK/consumer.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <fatune.h>
int main(void) {
  fat_context_options o = {0};
  fat_context *c = NULL;
  o.user_db = "";
  o.gpu_name = "NVIDIA H200", o.gpu_cc_major = 9, o.gpu_sm_count = 132;
  if (fat_context_open(&c, &o)) { printf("open: %s\n", fat_context_error(c)); return 1; }
  fat_attn_args a = {0};
  a.batch = 1, a.heads = a.heads_k = 8, a.seqlen_q = a.seqlen_k = 777, a.head_dim = 96;
  a.dtype = FAT_ATTN_BF16, a.mask = FAT_ATTN_MASK_CAUSAL;
  fat_choice ch;
  fat_status st = fat_attention_select(c, &a, &ch);
  if (st == FAT_OK && ch.origin == FAT_ORIGIN_BUILTIN) printf("%s\n", ch.variant);
  else if (st == FAT_OK) printf("%s from %s\n", ch.variant, ch.db_path);
  else printf("%s: %s\n", fat_strerror(st), fat_context_error(c));
  fat_context_close(c);
  return st != FAT_OK;
}
C
# What the consumer must print: the built-in bf16 causal d96 default, or a
# winner of any family read from the installed tables (when they hold one
# for the H200).
check_run() {
  local out
  out=$("$@") || fail "$1 failed: $out"
  case "$out" in
    fwd.mma80.bf16.d96.causal.m128n64w4s1) ;;
    "fwd."*".bf16.d96.causal."*" from $PREFIX/$LIBDIR/../share/fatune/fatune_tables.db") ;;
    *) fail "$1 printed '$out'" ;;
  esac
}

export PKG_CONFIG_PATH="$PREFIX/$LIBDIR/pkgconfig"
[ "$(pkg-config --modversion fatune)" = "0.2.0" ] || fail "pkg-config --modversion: $(pkg-config --modversion fatune)"
[ "$(pkg-config --variable=prefix fatune | xargs realpath)" = "$(realpath "$PREFIX")" ] \
  || fail "pkg-config prefix $(pkg-config --variable=prefix fatune) is not $PREFIX"
# shellcheck disable=SC2046
cc -o "$WORK/consumer_pc" "$WORK/consumer.c" $(pkg-config --cflags --libs fatune) \
  -Wl,-rpath,"$PREFIX/$LIBDIR" || fail "building against pkg-config (shared)"
check_run "$WORK/consumer_pc"
# shellcheck disable=SC2046
cc -o "$WORK/consumer_static" "$WORK/consumer.c" $(pkg-config --cflags fatune) \
  "$PREFIX/$LIBDIR/libfatune.a" $(pkg-config --libs-only-l --static fatune | sed 's/-lfatune//') \
  || fail "building against libfatune.a"
ldd "$WORK/consumer_static" | grep -q libfatune && fail "the static consumer links libfatune.so"
# The static library finds its tables relative to the program, not itself:
# point it at the installed ones explicitly.
out=$(FATUNE_TABLES="$PREFIX/share/fatune/fatune_tables.db" "$WORK/consumer_static") \
  || fail "static consumer: $out"
case "$out" in fwd.*.bf16.d96.causal.*) ;; *) fail "static consumer printed '$out'" ;; esac

mkdir -p "$WORK/cmake"
cat > "$WORK/cmake/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(consumer C)
find_package(fatune 0.2 REQUIRED)
add_executable(consumer_cmake ../consumer.c)
target_link_libraries(consumer_cmake PRIVATE fatune::fatune)
add_executable(consumer_cmake_static ../consumer.c)
target_link_libraries(consumer_cmake_static PRIVATE fatune::static)
CM
cmake -S "$WORK/cmake" -B "$WORK/cmake/build" -DCMAKE_PREFIX_PATH="$PREFIX" > "$WORK/cm.log" 2>&1 \
  && cmake --build "$WORK/cmake/build" >> "$WORK/cm.log" 2>&1 \
  || { cat "$WORK/cm.log"; fail "building against find_package(fatune)"; }
check_run "$WORK/cmake/build/consumer_cmake"
out=$(FATUNE_TABLES="$PREFIX/share/fatune/fatune_tables.db" "$WORK/cmake/build/consumer_cmake_static") \
  || fail "cmake static consumer: $out"
echo "install tree OK: $PREFIX ($LIBDIR)"
