#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The install tree of libfatune and the fatune command. `cmake --install`
# into a scratch prefix must give the command, the header, both libraries,
# the table database, a pkg-config file and a CMake package; a tiny
# consumer is then built against it with pkg-config and with find_package,
# linked shared and static, and every link must make the same choice
# (fat_attention_select's variant, origin and database) for a GPU described
# offline: the H200's bf16 causal d96 winner from the installed tables.
#
# The tables are found one way from every link (core/tables_path.h):
# beside the library or program, then the install path compiled in. So:
#  A. the build under test, installed elsewhere with --prefix (an install
#     moved as a whole): the shared consumer and the installed command find
#     the tables beside themselves (its --version names them, and its
#     explain and report read them with no database of one's own, as the
#     README shows); a static consumer, living elsewhere, by
#     FATUNE_TABLES, and without it the log (FATUNE_LOG) warns that none
#     was found and the built-in default serves;
#  B. a second build of the same source configured for the prefix it is
#     installed to: shared and static consumers find the tables with no
#     help; with the tables gone both warn and fall back alike.
# Usage: test_install.sh FATUNE_BIN (the build folder is its directory).
set -u -o pipefail
BUILD=$(cd "$(dirname "$1")" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/fatune-install-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
unset FATUNE_TABLES FATUNE_LOG
fail() { echo "FAIL: $*"; exit 1; }
VERSION=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BUILD/CMakeCache.txt")
DEFAULT_VARIANT=fwd.mma80.bf16.d96.causal.m128n64w4s1

# install PREFIX BUILD [--prefix]: installs BUILD and checks the files.
install_tree() {
  local prefix=$1 build=$2
  shift 2
  cmake --install "$build" "$@" > "$WORK/install.log" 2>&1 \
    || { cat "$WORK/install.log"; fail "cmake --install $build $*"; }
  LIBDIR=$(cd "$prefix" && ls -d lib*/libfatune.so | head -1 | xargs dirname)
  for f in bin/fatune include/fatune.h "$LIBDIR/libfatune.so" "$LIBDIR/libfatune.a" \
           share/fatune/fatune_tables.db "$LIBDIR/pkgconfig/fatune.pc" \
           "$LIBDIR/cmake/fatune/fatuneConfig.cmake" "$LIBDIR/cmake/fatune/fatuneConfigVersion.cmake"; do
    [ -e "$prefix/$f" ] || fail "missing $f in the install tree $prefix"
  done
}

cat > "$WORK/consumer.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <fatune.h>
/* Prints "variant | origin | database" of an H200's bf16 causal d96 call,
 * once the library is the header's version. */
int main(void) {
  if (fat_version_number() != FATUNE_VERSION_NUMBER ||
      strcmp(fat_version_string(), FATUNE_VERSION_STRING)) {
    printf("libfatune %s (%u) under the header of %s\n", fat_version_string(), fat_version_number(),
           FATUNE_VERSION_STRING);
    return 1;
  }
  fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
  fat_context *c = NULL;
  o.user_db = "";
  o.gpu_name = "NVIDIA H200", o.gpu_cc_major = 9, o.gpu_sm_count = 132;
  if (fat_context_open(&c, &o)) { printf("open: %s\n", fat_context_error(c)); return 1; }
  fat_attn_args a = FAT_ATTN_ARGS_INIT;
  a.batch = 1, a.heads = a.heads_k = 8, a.seqlen_q = a.seqlen_k = 777, a.head_dim = 96;
  a.dtype = FAT_ATTN_BF16, a.mask = FAT_ATTN_MASK_CAUSAL;
  fat_choice ch = FAT_CHOICE_INIT;
  fat_status st = fat_attention_select(c, &a, &ch);
  if (st == FAT_OK) printf("%s | %s | %s\n", ch.variant, fat_origin_name(ch.origin), ch.db_path);
  else printf("%s: %s\n", fat_strerror(st), fat_context_error(c));
  fat_context_close(c);
  return st != FAT_OK;
}
C

# run_consumer NAME PROGRAM...: the program's line into $WORK/NAME.out, its
# log into $WORK/NAME.err.
run_consumer() {
  local name=$1
  shift
  "$@" > "$WORK/$name.out" 2> "$WORK/$name.err" || fail "$name failed: $(cat "$WORK/$name.out" "$WORK/$name.err")"
}
# expect_tables NAME PREFIX: NAME chose a winner from PREFIX's installed tables.
expect_tables() {
  local want_db got
  want_db="$(cd "$2" && pwd -P)/share/fatune/fatune_tables.db"
  got=$(cat "$WORK/$1.out")
  case "$got" in
    "fwd."*".bf16.d96.causal."*" | shipped tables | $want_db") ;;
    *) fail "$1 printed '$got'; want a winner from $want_db" ;;
  esac
}
# expect_same A B: both links printed the same choice.
expect_same() {
  cmp -s "$WORK/$1.out" "$WORK/$2.out" \
    || fail "$1 chose '$(cat "$WORK/$1.out")' but $2 chose '$(cat "$WORK/$2.out")'"
}
# expect_no_tables NAME: the built-in default, and the log's warning.
expect_no_tables() {
  [ "$(cat "$WORK/$1.out")" = "$DEFAULT_VARIANT | built-in default | " ] \
    || fail "$1 without tables printed '$(cat "$WORK/$1.out")'"
  grep -q "^fatune: warning: no shipped tables found (looked for .*); set FATUNE_TABLES" "$WORK/$1.err" \
    || fail "$1 without tables logged no warning: '$(cat "$WORK/$1.err")'"
}

# ---- A: this build, installed with --prefix ---------------------------------
PREFIX="$WORK/prefix"
install_tree "$PREFIX" "$BUILD" --prefix "$PREFIX"
[ "$(FATUNE_TABLES= "$PREFIX/bin/fatune" --version)" = "fatune $VERSION
shipped tables: $(cd "$PREFIX" && pwd -P)/share/fatune/fatune_tables.db" ] \
  || fail "the installed fatune --version printed '$("$PREFIX/bin/fatune" --version)'"
# The README's explain and report work out of the box from the install
# tree: no database of one's own, the installed tables (with their
# ceilings) read instead, and said so.
mkdir -p "$WORK/home"
TABLES_A="$(cd "$PREFIX" && pwd -P)/share/fatune/fatune_tables.db"
out=$(cd / && HOME="$WORK/home" XDG_CACHE_HOME= FATUNE_DB= FATUNE_TABLES= \
      "$PREFIX/bin/fatune" explain --seqlen 8192 --head-dim 128 --dtype bf16 2>&1) \
  || fail "the installed fatune explain failed: $out"
grep -qxF "(your database has no GPU results: read from the shipped tables, $TABLES_A)" <<< "$out" \
  && grep -q '^Floors on NVIDIA [^:]*: copy bandwidth [0-9.]* TB/s (measured)' <<< "$out" \
  && grep -q '^Measured on NVIDIA [^:]*: winner fwd\.' <<< "$out" \
  || fail "the installed fatune explain did not read the installed tables: $out"
msg=$(cd / && HOME="$WORK/home" XDG_CACHE_HOME= FATUNE_DB= FATUNE_TABLES= \
      "$PREFIX/bin/fatune" report -o "$WORK/report.html" 2>&1 > /dev/null) \
  || fail "the installed fatune report failed: $msg"
grep -qF "reporting the shipped tables, $TABLES_A" <<< "$msg" && grep -q '<h2 id="summary">' "$WORK/report.html" \
  || fail "the installed fatune report did not draw the installed tables: $msg"

export PKG_CONFIG_PATH="$PREFIX/$LIBDIR/pkgconfig"
[ "$(pkg-config --modversion fatune)" = "$VERSION" ] || fail "pkg-config --modversion: $(pkg-config --modversion fatune)"
[ "$(pkg-config --variable=prefix fatune | xargs realpath)" = "$(realpath "$PREFIX")" ] \
  || fail "pkg-config prefix $(pkg-config --variable=prefix fatune) is not $PREFIX"
# shellcheck disable=SC2046
cc -o "$WORK/consumer_pc" "$WORK/consumer.c" $(pkg-config --cflags --libs fatune) \
  -Wl,-rpath,"$PREFIX/$LIBDIR" || fail "building against pkg-config (shared)"
# shellcheck disable=SC2046
cc -o "$WORK/consumer_static" "$WORK/consumer.c" $(pkg-config --cflags fatune) \
  "$PREFIX/$LIBDIR/libfatune.a" $(pkg-config --libs-only-l --static fatune | sed 's/-lfatune//') \
  || fail "building against libfatune.a"
ldd "$WORK/consumer_static" | grep -q libfatune && fail "the static consumer links libfatune.so"
run_consumer shared_a "$WORK/consumer_pc"
expect_tables shared_a "$PREFIX"
run_consumer static_a env FATUNE_TABLES="$PREFIX/share/fatune/fatune_tables.db" "$WORK/consumer_static"
# The same file by another name: the choice is the same but for the path.
sed -i "s#$PREFIX/share/fatune/fatune_tables.db#$(cd "$PREFIX" && pwd -P)/share/fatune/fatune_tables.db#" "$WORK/static_a.out"
expect_same shared_a static_a
# Without FATUNE_TABLES the moved install's static consumer has only the
# compiled-in path, which is not this prefix (unless the machine has a real
# install there).
COMPILED_IN=$(sed -n 's/^#define FAT_TABLES_INSTALL_PATH "\(.*\)"$/\1/p' "$BUILD/generated/fat_install_paths.h")
[ -n "$COMPILED_IN" ] || fail "no FAT_TABLES_INSTALL_PATH in $BUILD/generated/fat_install_paths.h"
if [ ! -e "$COMPILED_IN" ]; then
  run_consumer static_a_alone env FATUNE_LOG=1 "$WORK/consumer_static"
  expect_no_tables static_a_alone
  grep -q "$COMPILED_IN" "$WORK/static_a_alone.err" || fail "the warning does not name $COMPILED_IN"
fi

mkdir -p "$WORK/cmake"
cat > "$WORK/cmake/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.25)
project(consumer C)
find_package(fatune ${VERSION%.*} REQUIRED)
add_executable(consumer_cmake ../consumer.c)
target_link_libraries(consumer_cmake PRIVATE fatune::fatune)
add_executable(consumer_cmake_static ../consumer.c)
target_link_libraries(consumer_cmake_static PRIVATE fatune::static)
CM
cmake -S "$WORK/cmake" -B "$WORK/cmake/build" -DCMAKE_PREFIX_PATH="$PREFIX" > "$WORK/cm.log" 2>&1 \
  && cmake --build "$WORK/cmake/build" >> "$WORK/cm.log" 2>&1 \
  || { cat "$WORK/cm.log"; fail "building against find_package(fatune)"; }
run_consumer shared_cmake "$WORK/cmake/build/consumer_cmake"
expect_same shared_a shared_cmake
run_consumer static_cmake env FATUNE_TABLES="$(cd "$PREFIX" && pwd -P)/share/fatune/fatune_tables.db" \
  "$WORK/cmake/build/consumer_cmake_static"
expect_same shared_a static_cmake

# ---- B: a build configured for its prefix -----------------------------------
PREFIX_B="$WORK/prefix-b"
CUDA_ROOT=$(sed -n 's/^CUDA_ROOT:PATH=//p' "$BUILD/CMakeCache.txt")
CC_B=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
cmake -S "$SRC" -B "$WORK/build-b" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$PREFIX_B" \
  ${CUDA_ROOT:+-DCUDA_ROOT="$CUDA_ROOT"} ${CC_B:+-DCMAKE_C_COMPILER="$CC_B"} > "$WORK/b.log" 2>&1 \
  && cmake --build "$WORK/build-b" -j"$(nproc)" --target fatune fatune_shared fatune_static fatune_tables \
     >> "$WORK/b.log" 2>&1 \
  || { tail -30 "$WORK/b.log"; fail "building $SRC for the prefix $PREFIX_B"; }
install_tree "$PREFIX_B" "$WORK/build-b"
cc -o "$WORK/consumer_b" "$WORK/consumer.c" -I"$PREFIX_B/include" -L"$PREFIX_B/$LIBDIR" -lfatune \
  -Wl,-rpath,"$PREFIX_B/$LIBDIR" || fail "building the shared consumer of $PREFIX_B"
cc -o "$WORK/consumer_b_static" "$WORK/consumer.c" -I"$PREFIX_B/include" "$PREFIX_B/$LIBDIR/libfatune.a" \
  -lsqlite3 -ldl -lpthread -lm || fail "building the static consumer of $PREFIX_B"
run_consumer shared_b "$WORK/consumer_b"
expect_tables shared_b "$PREFIX_B"
run_consumer static_b "$WORK/consumer_b_static"
expect_tables static_b "$PREFIX_B"
expect_same shared_b static_b
# Run from another folder, by a bare name on $PATH: the same.
(cd / && PATH="$WORK:$PATH" consumer_b_static) > "$WORK/static_b_path.out" || fail "consumer_b_static on PATH"
expect_same shared_b static_b_path
# With the tables gone, both links warn and fall back alike.
mv "$PREFIX_B/share/fatune/fatune_tables.db" "$WORK/moved.db"
run_consumer shared_b_none env FATUNE_LOG=1 "$WORK/consumer_b"
run_consumer static_b_none env FATUNE_LOG=1 "$WORK/consumer_b_static"
expect_no_tables shared_b_none
expect_no_tables static_b_none
grep -q "$PREFIX_B/share/fatune/fatune_tables.db" "$WORK/static_b_none.err" \
  || fail "the static link's warning does not name the compiled-in $PREFIX_B/share/fatune/fatune_tables.db"
echo "install trees OK: $PREFIX (moved, $LIBDIR) and $PREFIX_B (configured)"
