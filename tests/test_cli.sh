#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The fatune command line: every refusal exits 2 and names the bad value;
# help and version exit 0. Needs no GPU. $1 is the fatune binary.
set -u
F=$1
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect STATUS "TEXT" args...: exit status and a line of stderr, exactly.
expect() {
  local want_rc=$1 want_msg=$2; shift 2
  local msg rc
  msg=$("$F" "$@" 2>&1 >/dev/null); rc=$?
  if [ "$rc" -eq "$want_rc" ] && grep -qxF -- "$want_msg" <<<"$msg"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    printf 'FAIL: fatune %s\n  want %d "%s"\n  got  %d "%s"\n' "$*" "$want_rc" "$want_msg" "$rc" "$msg"
  fi
}

expect 2 "fatune: unknown option '--frobnicate' (see --help)" --frobnicate
expect 2 "fatune: --head-dim: '0' is not a head dim fatune can tune (32, 64, 96, 128, 192, 256)" --head-dim 0
expect 2 "fatune: --head-dim: '1000' is not a head dim fatune can tune (32, 64, 96, 128, 192, 256)" --head-dim 1000
# Padded head dims run at run time on the next template up; only templates are tuned.
expect 2 "fatune: --head-dim: '80' is not a head dim fatune can tune (32, 64, 96, 128, 192, 256)" --head-dim 80
expect 2 "fatune: --head-dim: 'abc' is not a number" --head-dim abc
expect 2 "fatune: --head-dim: '128' given twice" --head-dim 128,128
expect 2 "fatune: --head-dim: empty list" --head-dim ""
expect 2 "fatune: --head-dim: empty item in '64,,128'" --head-dim 64,,128
expect 2 "fatune: --dtype: unknown dtype 'fp8' (fp16, bf16, e4m3, fp16-e4m3kv, bf16-e4m3kv)" --dtype fp8
# e4m3 is the forward's alone, with --direction bwd in either order.
expect 2 "fatune: --dtype e4m3: there is no e4m3 backward (fp8 inputs are the forward's): --direction fwd, or the backward with --dtype fp16,bf16" --dtype e4m3 --direction bwd
expect 2 "fatune: --dtype e4m3: there is no e4m3 backward (fp8 inputs are the forward's): --direction fwd, or the backward with --dtype fp16,bf16" --direction fwd,bwd --dtype bf16,e4m3
# So are the fp8 K/V caches, the first one listed named.
expect 2 "fatune: --dtype fp16-e4m3kv: there is no fp16-e4m3kv backward (fp8 K/V caches are the forward's): --direction fwd, or the backward with --dtype fp16,bf16" --dtype fp16-e4m3kv --direction bwd
expect 2 "fatune: --dtype bf16-e4m3kv: there is no bf16-e4m3kv backward (fp8 K/V caches are the forward's): --direction fwd, or the backward with --dtype fp16,bf16" --direction bwd --dtype fp16,bf16-e4m3kv,e4m3
expect 2 "fatune: --mask: unknown mask 'sliding' (none, causal, local)" --mask sliding
expect 2 "fatune: --family: 'a b' is no family name (letters, digits and '_', at most 31)" --family "a b"
expect 2 "fatune: --family: 'ws90' given twice" --family ws90,ws90
expect 1 "fatune: --family nope: no variant of that family in this query for sm_80" --arch sm_80 --family nope --list
expect 1 "fatune: --family ws90: no variant of that family in this query for sm_80" --arch sm_80 --family ws90 --list
expect 2 "fatune: --param: 'persistent=2' is not NAME=VALUE (e.g. PERSISTENT=2; at most 63 characters)" --param persistent=2
expect 2 "fatune: --param: 'PERSISTENT' is not NAME=VALUE (e.g. PERSISTENT=2; at most 63 characters)" --param PERSISTENT
expect 2 "fatune: --param: 'PERSISTENT=2' given twice" --param PERSISTENT=2,PERSISTENT=2
expect 1 "fatune: --param PERSISTENT=2: no variant of this query for sm_80 has it" --arch sm_80 --param PERSISTENT=2 --list
expect 1 "fatune: --param PERSISTENT=2,OVERLAP=1: no variant of this query for sm_90a has all of them" --arch sm_90a --mask none --param PERSISTENT=2,OVERLAP=1 --list
# --param keeps exactly the variants with every NAME=VALUE: ws90's drawing,
# overlapping causal d128 bf16 ones (one a key tile), and no PERSISTENT=20 lookalike.
if [ "$("$F" --list --arch sm_90a --head-dim 128 --dtype bf16 --mask causal --param PERSISTENT=2,OVERLAP=1 2>/dev/null |
       grep -c '^fwd\.ws90\.bf16\.d128\.causal\.m128n[0-9]*s2op\?d ')" -eq 6 ] &&
   [ "$("$F" --list --arch sm_90a --head-dim 128 --dtype bf16 --mask causal --param PERSISTENT=2,OVERLAP=1 2>/dev/null | wc -l)" -eq 6 ]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL: --param PERSISTENT=2,OVERLAP=1 does not list the 6 drawing, overlapping variants"
fi
# The local mask's windows: LEFT,RIGHT each, ':'-separated; only with local, and local needs one.
expect 2 "fatune: --mask local needs --window LEFT,RIGHT (e.g. --window 256,0; -1 for no bound on a side)" --mask none,local
expect 2 "fatune: --window applies to the local mask only: add local to --mask" --window 256,0
expect 2 "fatune: --window applies to the local mask only: add local to --mask" --mask none,causal --window 256,0
expect 2 "fatune: --window: '256' is not a window: give LEFT,RIGHT (keys seen before and after a query's position, -1 for no bound), e.g. 256,0" --mask local --window 256
expect 2 "fatune: --window: '1,2,3' is not a window: give LEFT,RIGHT (keys seen before and after a query's position, -1 for no bound), e.g. 256,0" --mask local --window 1,2,3
expect 2 "fatune: --window: -2 is out of range [-1, 1048576]" --mask local --window -2,0
expect 2 "fatune: --window: 'x' is not a number" --mask local --window 256,x
expect 2 "fatune: --window: '-1,-1' bounds neither side: that is --mask none" --mask local --window 256,0:-1,-1
expect 2 "fatune: --window: '256,0' given twice" --mask local --window 256,0:1024,-1:256,0
# Variable-length profiles: lengths and batch are theirs.
expect 2 "fatune: --varlen gives its problems' lengths and batch: leave out --seqlen, --seqlen-k and --batch" --varlen 538,3976 --batch 4
expect 2 "fatune: --varlen: '538,0': a varlen profile is a comma-separated list of sequence lengths, each 1 to 1048576" --varlen 538,0
expect 2 "fatune: --window: empty item in '256,0::1024,0'" --mask local --window 256,0::1024,0
expect 2 "fatune: --window given twice" --mask local --window 256,0 --window 1024,0
expect 2 "fatune: --seqlen: 0 is out of range [1, 1048576]" --seqlen 0
expect 2 "fatune: --seqlen: -5 is out of range [1, 1048576]" --seqlen 512,-5
expect 2 "fatune: --seqlen: 99999999999999999999 is out of range [1, 1048576]" --seqlen 99999999999999999999
expect 2 "fatune: --gpu: -1 is out of range [0, 1023]" --gpu -1
expect 2 "fatune: --gpu given twice" --gpu 0 --gpu 1
expect 2 "fatune: --gpu needs a value" --gpu
expect 2 "fatune: --jobs: 0 is out of range [1, 256]" --jobs 0
expect 2 "fatune: --reps: 5 is out of range [20, 10000]" --reps 5
ARCHS="sm_80, sm_86, sm_87, sm_89, sm_90a, sm_100, sm_103, sm_120"
expect 2 "fatune: --arch: 'sm_75' is not an architecture fatune generates for ($ARCHS)" --arch sm_75
# ... only what the generator knows: sm_90 passed the old name check, then
# the generator refused it with exit 1 (and so every GPU of 8.6, 8.9, 10.x).
expect 2 "fatune: --arch: 'sm_90' is not an architecture fatune generates for ($ARCHS)" --arch sm_90
expect 2 "fatune: --arch: 'sm_121' is not an architecture fatune generates for ($ARCHS)" --arch sm_121
for a in sm_86 sm_87 sm_89 sm_100 sm_103 sm_120; do
  if "$F" --list --head-dim 64 --dtype fp16 --mask none --arch "$a" 2>/dev/null | grep -q '^fwd.mma80.fp16.d64.none.m128n64w4s1 (default)'; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); echo "FAIL: --arch $a lists no mma80 default"
  fi
done
expect 2 "fatune: --db: empty path" --db ""
expect 2 "fatune: --retune given twice" --retune --retune
expect 2 "fatune: --exhaustive given twice" --exhaustive --list --exhaustive
expect 2 "fatune: --quiet and --verbose contradict each other" -q -v
expect 2 "fatune: --head-dim given twice" --head-dim 64 --head-dim 128

# More bad values: non-numeric, huge, negative, zero, duplicates, too many.
expect 2 "fatune: --gpu: 'abc' is not a number" --gpu abc
# --gpu LIST or all: indices each in range, none twice, all alone.
expect 2 "fatune: --gpu: '1' given twice" --gpu 0,1,1
expect 2 "fatune: --gpu: 'all' goes alone, not in a list of indices" --gpu 0,all
expect 2 "fatune: --gpu: 1024 is out of range [0, 1023]" --gpu 0,1024
expect 2 "fatune: --gpu: 'x' is not a number" --gpu 1,x
expect 2 "fatune: --gpu: 'ALL' is not a number" --gpu ALL
expect 2 "fatune: --gpu: empty list" --gpu ""
expect 2 "fatune: --gpu: empty item in '0,,1'" --gpu 0,,1
expect 2 "fatune: --gpu: more than 16 items" --gpu 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16
expect 2 "fatune: --gpu given twice" --gpu all --gpu 0
if "$F" --help | grep -q "^  --gpu LIST         CUDA device indices, e.g. 0 or 0,1, or all: one worker per GPU,$"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: --help names --gpu LIST and all"
fi
expect 2 "fatune: --gpu: '0x1' is not a number" --gpu 0x1
expect 2 "fatune: --gpu: 99999 is out of range [0, 1023]" --gpu 99999
expect 2 "fatune: --jobs: 257 is out of range [1, 256]" --jobs 257
expect 2 "fatune: --jobs: -1 is out of range [1, 256]" --jobs -1
expect 2 "fatune: --reps: 100000 is out of range [20, 10000]" --reps 100000
expect 2 "fatune: --reps: '1e3' is not a number" --reps 1e3
expect 2 "fatune: --timeout: 0 is out of range [1, 3600]" --timeout 0
expect 2 "fatune: --timeout: 3601 is out of range [1, 3600]" --timeout 3601
expect 2 "fatune: --timeout needs a value" --timeout
expect 2 "fatune: --dtype: 'fp16' given twice" --dtype fp16,fp16
expect 2 "fatune: --mask: 'none' given twice" --mask none,none
expect 2 "fatune: --mask: empty list" --mask ""
expect 2 "fatune: --seqlen: more than 16 items" --seqlen 512,1024,2048,4096,8192,16384,1,2,3,4,5,6,7,8,9,10,11
expect 2 "fatune: --arch: unknown architecture '' (sm_80, sm_86, sm_89, sm_90a, ...)" --arch ""
expect 2 "fatune: --arch: unknown architecture 'sm_800000000000000' (sm_80, sm_86, sm_89, sm_90a, ...)" --arch sm_800000000000000
expect 2 "fatune: --db: empty path" --db=
expect 2 "fatune: --list given twice" --list --list
expect 2 "fatune: unknown option '-x' (see --help)" -x
# The problem key beyond the benchmark shapes: keys, groups, batch.
expect 2 "fatune: --seqlen-k: 0 is out of range [1, 1048576]" --seqlen-k 0
expect 2 "fatune: --seqlen-k: '65536' given twice" --seqlen-k 65536,65536
expect 2 "fatune: --gqa: 'gqa' is not a group size (1 .. 128 query heads per K/V head) or mqa" --gqa gqa
expect 2 "fatune: --gqa: '0' is not a group size (1 .. 128 query heads per K/V head) or mqa" --gqa 0
expect 2 "fatune: --gqa: '129' is not a group size (1 .. 128 query heads per K/V head) or mqa" --gqa 129
expect 2 "fatune: --gqa: 'mqa' given twice" --gqa 1,mqa,mqa
expect 2 "fatune: --batch: 0 is out of range [1, 65536]" --batch 0
expect 2 "fatune: --batch given twice" --batch 8 --batch 8
# --shard K/N: 1 <= K <= N, each a whole number, the value named.
expect 2 "fatune: --shard: '0/2': K (this shard) must be 1 to N (2)" --shard 0/2
expect 2 "fatune: --shard: '3/2': K (this shard) must be 1 to N (2)" --shard 3/2
expect 2 "fatune: --shard: '1/0': N (the number of shards) must be 1 to 4096" --shard 1/0
expect 2 "fatune: --shard: 'x' is not K/N (shard K of N machines, e.g. 2/4)" --shard x
expect 2 "fatune: --shard given twice" --shard 1/2 --shard 2/2
# Shards of one query split its problems and keep their variants only:
# fp16 and bf16 d64 none at two lengths (fp16 s512, s1024, bf16 s512,
# s1024 in tuning order): shard 3/4 is bf16 s512 alone, with its variants
# (mma80's 33, splitkv's 33, paged's 9 and the baseline's 2).
if [ "$("$F" --list --shard 3/4 --head-dim 64 --dtype fp16,bf16 --mask none --seqlen 512,1024 --arch sm_80 2>&1 >/dev/null |
       grep -c '^fatune: shard 3/4: 1 of the query.s 4 problems, ')" -eq 1 ] &&
   [ "$("$F" --list --shard 3/4 --head-dim 64 --dtype fp16,bf16 --mask none --seqlen 512,1024 --arch sm_80 2>/dev/null | grep -vc '^fwd\.[a-z0-9]*\.bf16\.')" -eq 0 ] &&
   [ "$("$F" --list --shard 3/4 --head-dim 64 --dtype fp16,bf16 --mask none --seqlen 512,1024 --arch sm_80 2>/dev/null | wc -l)" -eq 77 ]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: --list --shard 3/4 (want 1 of 4 problems, the 77 bf16 variants only)"
fi

# A database path that cannot be written: refused with exit 2 before any work.
printf 'not a database at all, just text\n%.0s' {1..64} >"$tmp/corrupt.db"
expect 2 "fatune: --db: not a fatune database: $tmp/corrupt.db: file is not a database" \
  --head-dim 64 --dtype fp16 --mask none --seqlen 512 --db "$tmp/corrupt.db"
expect 2 "fatune: --db: cannot open database /nonexistent-dir/x.db: unable to open database file (No such file or directory)" \
  --head-dim 64 --dtype fp16 --mask none --seqlen 512 --db /nonexistent-dir/x.db
# Paths that are no database file: a FIFO (open() would wait for a writer
# forever), devices (SQLite left a -journal beside /dev/null as root), a
# folder, and SQLite's in-memory name (every result would be lost).
mkfifo "$tmp/fifo.db"
expect 2 "fatune: --db: cannot open database $tmp/fifo.db: not a regular file" \
  --head-dim 64 --dtype fp16 --mask none --seqlen 512 --db "$tmp/fifo.db"
for dev in /dev/null /dev/full; do
  journal_before=$([ -e "$dev-journal" ] && echo yes)
  expect 2 "fatune: --db: cannot open database $dev: not a regular file" \
    --head-dim 64 --dtype fp16 --mask none --seqlen 512 --db "$dev"
  if [ -z "$journal_before" ] && [ -e "$dev-journal" ]; then
    fail=$((fail + 1)); echo "FAIL: --db $dev left $dev-journal"
  else
    pass=$((pass + 1))
  fi
done
expect 2 "fatune: --db: cannot open database $tmp: it is a folder" \
  --head-dim 64 --dtype fp16 --mask none --seqlen 512 --db "$tmp"
expect 2 "fatune: --db: cannot open database :memory:: an in-memory database keeps nothing; give a file" \
  --head-dim 64 --dtype fp16 --mask none --seqlen 512 --db :memory:

# Valid lists are accepted (the list of three head dims reaches --list):
# mma80's default and the paged family's of each (head dim, dtype, mask),
# and the splitkv family's decoding default up to d128.
if [ "$("$F" --list --head-dim 64,128,256 --dtype fp16,bf16 --mask none,causal --arch sm_90a 2>/dev/null | grep -c '(default)')" -eq 32 ]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: --head-dim 64,128,256 (want 32 defaults)"
fi

# Local windows with the other masks: one default per (head dim, dtype,
# mask) and family with defaults (mma80, paged, splitkv).
if [ "$("$F" --list --head-dim 128 --dtype fp16 --mask none,causal,local --window=256,0:-1,0 --arch sm_90a 2>/dev/null | grep -c '(default)')" -eq 9 ] &&
   "$F" --list --head-dim 128 --dtype fp16 --mask local --window 256,0 --arch sm_90a 2>/dev/null |
     grep -q '^fwd.mma80.fp16.d128.local.m128n64w4s1 (default)'; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: --mask none,causal,local --window 256,0:-1,0 (want 9 defaults, the local one named)"
fi
if "$F" --help | grep -q "^  --window LIST      the local mask's windows L,R, ':'-separated"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: --help names --window"
fi

# Help and version.
if "$F" --help | grep -q '^Usage: fatune'; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: --help"; fi
# The version, and the shipped tables found as libfatune finds them: from the
# build tree's fatune, the build's runtime/fatune_tables.db.
want_version="fatune 0.6.0
shipped tables: $(cd "$(dirname "$F")" && pwd -P)/runtime/fatune_tables.db"
got_version=$(env -u FATUNE_TABLES "$F" --version)
if [ "$got_version" = "$want_version" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: --version printed '$got_version'"; fi
got_version=$(FATUNE_TABLES=/nonexistent/a.db "$F" --version | tail -1)
if [ "$got_version" = "shipped tables: none found (looked for /nonexistent/a.db)" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: --version with a missing FATUNE_TABLES printed '$got_version'"; fi

# --list: the query's variants, names stable, one default per (dtype,
# mask) of mma80, of the paged family and of splitkv.
n=$("$F" --list --head-dim 128 --dtype bf16 --mask causal --arch sm_90a 2>/dev/null | wc -l)
defaults=$("$F" --list --head-dim 128 --arch sm_90a 2>/dev/null | grep -c '(default)')
if [ "$n" -ge 12 ] && [ "$defaults" -eq 12 ] &&
   "$F" --list --head-dim 128 --dtype bf16 --mask causal --arch sm_90a 2>/dev/null |
     grep -q '^fwd.mma80.bf16.d128.causal.m128n64w4s1 (default)  BLOCK_M=128 BLOCK_N=64 STAGES=1 WARPS=4  [0-9a-f]\{64\}$'; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: --list ($n variants, $defaults defaults)"
fi

# The table commands: an empty --db is no path (it once meant the default
# database, which a merge then wrote into), and a repeated one is refused,
# not last-wins; so for their other valued flags. The default database is
# kept under $tmp, and never made.
export XDG_CACHE_HOME="$tmp/cache"
for args in "merge $tmp/other.db" "export --gpu-name X" "import $tmp/t.sql" retire-stale rehash; do
  cmd=${args%% *}
  # shellcheck disable=SC2086
  expect 2 "fatune $cmd: --db: empty path" $args --db ""
  # shellcheck disable=SC2086
  expect 2 "fatune $cmd: --db: empty path" $args --db=
  # shellcheck disable=SC2086
  expect 2 "fatune $cmd: --db given twice" $args --db "$tmp/a.db" --db "$tmp/b.db"
  # shellcheck disable=SC2086
  expect 2 "fatune $cmd: --db needs a value" $args --db
done
expect 2 "fatune export: --gpu-name: empty name" export --gpu-name ""
expect 2 "fatune export: --gpu-name given twice" export --gpu-name X --gpu-name Y
expect 2 "fatune export: -o: empty path" export --gpu-name X -o ""
expect 2 "fatune export: -o given twice" export --gpu-name X -o "$tmp/x.sql" -o "$tmp/y.sql"
expect 2 "fatune export: --ids-from: empty path" export --gpu-name X --ids-from ""
expect 2 "fatune export: --ids-from given twice" export --gpu-name X --ids-from "$tmp/x.sql" --ids-from "$tmp/y.sql"
expect 2 "fatune export: --ids-from keeps ids, --renumber makes new ones: give one" \
  export --gpu-name X --ids-from "$tmp/x.sql" --renumber
expect 2 "fatune import: --gpu-name, -o and --ids-from belong to export" import --ids-from "$tmp/x.sql" "$tmp/t.sql"
expect 2 "fatune import: unknown option '--renumber'" import --renumber "$tmp/t.sql"
expect 2 "fatune retire-stale: takes only --db" retire-stale --ids-from "$tmp/x.sql"
# A GPU name is one line: a newline would add lines to the export's header.
expect 2 "fatune export: --gpu-name: byte 2 is 0x0a, a control character" export --gpu-name "$(printf 'A\nB')"
for f in "$tmp/cache/fatune/fatune.db" "$tmp/a.db" "$tmp/b.db"; do
  if [ -e "$f" ]; then
    fail=$((fail + 1)); echo "FAIL: a refused table command made $f"
  else
    pass=$((pass + 1))
  fi
done
unset XDG_CACHE_HOME
# export -o PATH replaces only a regular file (a link, FIFO or device there
# once became a regular file, or blocked), and leaves what is there as it was.
echo keep >"$tmp/victim"
ln -s "$tmp/victim" "$tmp/link.sql"
mkfifo "$tmp/fifo.sql"
mkdir "$tmp/dir.sql"
"$F" retire-stale --db "$tmp/e.db" 2>/dev/null   # an empty database to export from
for target in link fifo dir; do
  expect 1 "fatune export: $tmp/$target.sql exists and is not a regular file: not replaced" \
    export --db "$tmp/e.db" --gpu-name X -o "$tmp/$target.sql"
done
if [ "$(cat "$tmp/victim")" = keep ] && [ -L "$tmp/link.sql" ] && [ -p "$tmp/fifo.sql" ] &&
   [ -d "$tmp/dir.sql" ] && [ -z "$(find "$tmp" -maxdepth 1 -name '*.tmp')" ]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: a refused export -o changed what was there"
fi

# One exit-status rule for every subcommand (--help says it): an unusable
# --db is a usage error (2) for the table commands as for tune, report and
# explain.
for args in "merge $tmp/other.db" "export --gpu-name X" "import $tmp/t.sql" retire-stale rehash; do
  cmd=${args%% *}
  # shellcheck disable=SC2086
  expect 2 "fatune $cmd: --db: not a fatune database: $tmp/corrupt.db: file is not a database" $args --db "$tmp/corrupt.db"
  # shellcheck disable=SC2086
  expect 2 "fatune $cmd: --db: cannot open database /dev/null: not a regular file" $args --db /dev/null
done
expect 2 "fatune report: --db: not a fatune database: $tmp/corrupt.db: file is not a database" report --db "$tmp/corrupt.db"
expect 2 "fatune explain: --db: not a fatune database: $tmp/corrupt.db: file is not a database" explain --seqlen 512 --head-dim 64 --db "$tmp/corrupt.db"
for sub in "" explain report export import merge retire-stale rehash; do
  # shellcheck disable=SC2086
  if "$F" $sub --help | grep -qx "nothing checked or timed); 130 interrupted (^C: what was done is kept); 143" &&
     "$F" $sub --help | grep -qx "terminated (SIGTERM: a tuning run stops as on ^C, keeping what was done)."; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); echo "FAIL: fatune $sub --help does not state the exit statuses"
  fi
done
# Commands that only read open the database read-only: export of a name
# that is no database creates none (it once made typo.db), and neither
# --list nor explain makes the cache folder of a default database.
expect 2 "fatune export: --db: no database at $tmp/typo.db (No such file or directory)" \
  export --db "$tmp/typo.db" --gpu-name X
expect 2 "fatune report: --db: no database at $tmp/typo.db" report --db "$tmp/typo.db"
if [ -e "$tmp/typo.db" ]; then fail=$((fail + 1)); echo "FAIL: export or report made typo.db"; else pass=$((pass + 1)); fi
: >"$tmp/zero.db"
expect 2 "fatune export: --db: not a fatune database: $tmp/zero.db: an empty file (no fatune schema yet)" \
  export --db "$tmp/zero.db" --gpu-name X
if [ ! -s "$tmp/zero.db" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: export wrote into zero.db"; fi
XDG_CACHE_HOME="$tmp/cache2" FATUNE_DB= "$F" --list --head-dim 64 --arch sm_80 >/dev/null 2>&1
XDG_CACHE_HOME="$tmp/cache2" FATUNE_DB= "$F" explain --seqlen 512 --head-dim 64 >/dev/null 2>&1
XDG_CACHE_HOME="$tmp/cache2" FATUNE_DB= "$F" export --gpu-name X >/dev/null 2>&1
if [ -e "$tmp/cache2" ]; then fail=$((fail + 1)); echo "FAIL: --list, explain or export made $tmp/cache2"; else pass=$((pass + 1)); fi
# Output that cannot be written is a failure, named (once exit 0).
if [ -w /dev/full ]; then
  for args in "--list --head-dim 64 --arch sm_80" --help --version "explain --seqlen 512 --head-dim 64" "import --help"; do
    # shellcheck disable=SC2086
    msg=$("$F" $args 2>&1 >/dev/full | grep -v '^fatune: [0-9]* variants'); rc=$?
    # shellcheck disable=SC2086
    "$F" $args >/dev/full 2>/dev/null; rc=$?
    who="fatune"; case "$args" in explain*) who="fatune explain";; esac
    if [ "$rc" -eq 1 ] && [ "$msg" = "$who: cannot write the output: No space left on device" ]; then
      pass=$((pass + 1))
    else
      fail=$((fail + 1)); printf 'FAIL: fatune %s >/dev/full: %d "%s"\n' "$args" "$rc" "$msg"
    fi
  done
fi
# Numbers are the whole string: leading white space is no more a number
# than trailing.
expect 2 "fatune: --gpu: ' 1' is not a number" --gpu " 1"
expect 2 "fatune: --gpu: '1 ' is not a number" --gpu "1 "

# import reads a table from standard input ('-') and from a pipe, and
# refuses a folder by name (it once read one after a malloc of 2^63 bytes).
# A scratch database left by an import that was killed (its pid gone) is
# swept by the next one; a live process's is left alone.
SHIPPED="$(dirname "$0")/../db/tables/nvidia-h200.sql"
mkdir -p "$tmp/scratch"
sh -c 'exit 0' & dead=$!; wait "$dead"
: >"$tmp/scratch/fatune-import-$dead-AbC123"; : >"$tmp/scratch/fatune-import-$dead-AbC123-wal"
: >"$tmp/scratch/fatune-import-$$-XyZ789"
# What importing the file by its name reports, rows and builds: standard
# input and a pipe must report the same.
counts=$("$F" import --db "$tmp/byname.db" "$SHIPPED" 2>&1 | sed -n 's/^fatune import: .*: \([0-9]* new rows into\) .* (\(.*\))$/\1|\2/p')
rows_in=${counts%%|*} builds=${counts#*|}
msg=$(TMPDIR="$tmp/scratch" "$F" import --db "$tmp/stdin.db" - <"$SHIPPED" 2>&1); rc=$?
if [ "$rc" -eq 0 ] && [ -n "$counts" ] && [ "$msg" = "fatune import: (stdin): $rows_in $tmp/stdin.db ($builds)" ]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); printf 'FAIL: import - <table: %d "%s"\n' "$rc" "$msg"
fi
if [ "$(ls "$tmp/scratch")" = "fatune-import-$$-XyZ789" ]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: scratch folder after an import: $(ls "$tmp/scratch" | tr '\n' ' ')"
fi
msg=$(cat "$SHIPPED" | "$F" import --db "$tmp/pipe.db" /dev/stdin 2>&1); rc=$?
if [ "$rc" -eq 0 ] && [ -n "$counts" ] && [ "$msg" = "fatune import: /dev/stdin: $rows_in $tmp/pipe.db ($builds)" ]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); printf 'FAIL: import /dev/stdin from a pipe: %d "%s"\n' "$rc" "$msg"
fi
expect 1 "fatune import: cannot read $tmp/scratch: it is a folder" import --db "$tmp/dir.db" "$tmp/scratch"
expect 1 "fatune merge: $tmp/scratch: not a regular file" merge --db "$tmp/dir.db" "$tmp/scratch"
printf -- '-- fatune tables 1\nINSERT\000 INTO gpus;\n-- end of fatune tables\n' >"$tmp/nul.sql"
expect 1 "fatune import: $tmp/nul.sql:2: a NUL byte: not a table file" import --db "$tmp/dir.db" "$tmp/nul.sql"

# --direction: fwd (the default), bwd, or both; refusals name the value.
expect 2 "fatune: --direction: unknown direction 'sideways' (fwd, bwd)" --direction sideways
expect 2 "fatune: --direction: 'fwd' given twice" --direction fwd,bwd,fwd
expect 2 "fatune: --direction: empty list" --direction ""
expect 2 "fatune: --direction given twice" --direction fwd --direction bwd
# The backward has no d32 template: named at once, and left out of its default list.
expect 2 "fatune: --head-dim: 32 has no backward template (64, 96, 128, 192, 256)" --direction bwd --head-dim 32
expect 2 "fatune: --head-dim: 32 has no backward template (64, 96, 128, 192, 256)" --direction fwd,bwd --head-dim 32,64
if "$F" --list --direction bwd --arch sm_90a 2>/dev/null | grep -q '\.d32\.'; then
  fail=$((fail + 1)); echo "FAIL: --direction bwd lists d32 variants"
elif [ "$("$F" --list --direction bwd --arch sm_90a 2>/dev/null | grep -c '^bwd\.')" -gt 0 ]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: --direction bwd without --head-dim lists nothing"
fi
# bf16 d128 causal on sm_90a: 22 atomic + 22 separate backward variants (12
# each without PREFETCH, 10 with: family_bwd_mma80.lua drops it where few
# accumulators leave room for many warps) and 4 of the wgmma90 family, the
# default FlashAttention-2's 64 x 64 tiles with atomic dQ and no prefetch;
# mma80f's 36 (mma80's configurations that keep room for the soft-cap's
# factor; its default eight warps); ws90's 20, each with STATS_AHEAD and
# DS_STSM 0 and 1 (80), each again with DQ_MODE ordered (160, named
# .ordered); fwd,bwd lists both.
bwd=$("$F" --list --direction bwd --head-dim 128 --dtype bf16 --mask causal --arch sm_90a 2>/dev/null)
both=$("$F" --list --direction fwd,bwd --head-dim 128 --dtype bf16 --mask causal --arch sm_90a 2>/dev/null | wc -l)
fwd=$("$F" --list --head-dim 128 --dtype bf16 --mask causal --arch sm_90a 2>/dev/null | wc -l)
if [ "$(grep -c '^bwd\.mma80\.bf16\.d128\.causal\..*\.atomic ' <<<"$bwd")" -eq 12 ] &&
   [ "$(grep -c '^bwd\.mma80\.bf16\.d128\.causal\..*\.atomic\.p1 ' <<<"$bwd")" -eq 10 ] &&
   [ "$(grep -c '^bwd\.mma80\.bf16\.d128\.causal\..*\.separate ' <<<"$bwd")" -eq 12 ] &&
   [ "$(grep -c '^bwd\.mma80\.bf16\.d128\.causal\..*\.separate\.p1 ' <<<"$bwd")" -eq 10 ] &&
   [ "$(grep -c '^bwd\.wgmma90\.bf16\.d128\.causal\.m64n\(64\|128\)s[12] ' <<<"$bwd")" -eq 4 ] &&
   [ "$(grep -c '^bwd\.ws90\.bf16\.d128\.causal\.m64n\(64\|128\)s[23] ' <<<"$bwd")" -eq 4 ] &&
   [ "$(grep -c '^bwd\.ws90\.bf16\.d128\.causal\.m64n\(64\|128\)s[23]p ' <<<"$bwd")" -eq 4 ] &&
   [ "$(grep -c '^bwd\.ws90\.bf16\.d128\.causal\.m64n128s[23]k ' <<<"$bwd")" -eq 2 ] &&
   [ "$(grep -c '^bwd\.ws90\.bf16\.d128\.causal\.m64n\(64\|128\)s[23]k\?p\?g .* GROUPED=1 ' <<<"$bwd")" -eq 10 ] &&
   [ "$(grep -c '^bwd\.ws90\.bf16\.d128\.causal\..*\.ordered .* DQ_MODE=ordered ' <<<"$bwd")" -eq 80 ] &&
   [ "$(grep -c '^bwd\.ws90\.bf16\.d128\.causal\..* DQ_MODE=atomic ' <<<"$bwd")" -eq 80 ] &&
   [ "$(grep -c '^bwd\.mma80f\.bf16\.d128\.causal\.' <<<"$bwd")" -eq 36 ] &&
   grep -q '^bwd.mma80f.bf16.d128.causal.m64n64w8.atomic (default)  BLOCK_M=64 BLOCK_N=64 DQ_MODE=atomic PREFETCH=0 WARPS=8  [0-9a-f]\{64\}$' <<<"$bwd" &&
   [ "$(wc -l <<<"$bwd")" -eq 244 ] &&
   grep -q '^bwd.mma80.bf16.d128.causal.m64n64w4.atomic (default)  BLOCK_M=64 BLOCK_N=64 DQ_MODE=atomic PREFETCH=0 WARPS=4  [0-9a-f]\{64\}$' <<<"$bwd" &&
   [ "$both" -eq $((fwd + 244)) ]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: --list --direction bwd ($(wc -l <<<"$bwd") bwd lines, $both for fwd,bwd, $fwd fwd)"
fi

# With no --db and no results of one's own, explain and report read the
# shipped tables (found beside this fatune, as the build leaves them) and say
# so; explain shows a winner stored for another batch at its own shape, the
# floors from the ceilings the table carries (of the GPU with the most
# winners, whichever that is), and the winner against the peak of its
# family's instruction (or that it was not measured).
mkdir -p "$tmp/empty-home"
alone() { env -u FATUNE_DB -u FATUNE_TABLES -u XDG_CACHE_HOME HOME="$tmp/empty-home" "$F" "$@"; }
tables_db=$(alone --version | sed -n 's/^shipped tables: //p')
if [ -f "$tables_db" ]; then
  out=$(alone explain --seqlen 4096 --head-dim 128 --dtype bf16 --causal 2>&1); rc=$?
  if [ $rc -eq 0 ] && grep -qxF "(your database has no GPU results: read from the shipped tables, $tables_db)" <<<"$out" &&
     grep -q '^Measured on .*: winner fwd\.' <<<"$out" && grep -q '^  (at the stored shape: batch ' <<<"$out" &&
     grep -q '^Floors on NVIDIA [^:]*: copy bandwidth [0-9.]* TB/s (measured), bf16 mma\.sync peak [0-9.]* TFLOP/s (measured)' <<<"$out" &&
     grep -qE '^  (compute floor / measured time: [0-9.]+% of the (mma\.sync|wgmma) peak|(mma\.sync|wgmma) peak: not measured) \([a-z0-9]+ issues (mma\.sync|wgmma)\)$' <<<"$out" &&
     ! grep -q 'no measured ceilings' <<<"$out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); printf 'FAIL: explain without a database of its own (%d):\n%s\n' "$rc" "$out"
  fi
  msg=$(alone report -o "$tmp/report.html" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 0 ] && [ -s "$tmp/report.html" ] &&
     grep -qxF "fatune report: no GPU results in $tmp/empty-home/.cache/fatune/fatune.db: reporting the shipped tables, $tables_db" <<<"$msg"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); printf 'FAIL: report without a database of its own (%d): %s\n' "$rc" "$msg"
  fi
  # The shipped tables hold a table per GPU model (the H200's and the
  # H100's): without --gpu-name the one with the most winners speaks, and
  # both commands say so; --gpu-name picks another.
  read -r n_gpus most < <(python3 - "$tables_db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
rows = c.execute("SELECT g.name, (SELECT COUNT(*) FROM winners w WHERE w.gpu_id = g.id) n FROM gpus g"
                 " ORDER BY n DESC, g.id DESC").fetchall()
print(len({r[0] for r in rows}), rows[0][0].replace(" ", "_") if rows else "")
PY
)
  most=${most//_/ }
  if [ "${n_gpus:-0}" -gt 1 ]; then
    if grep -qxF "fatune report: the shipped tables hold $n_gpus GPUs: reporting $most, the most tuned (--gpu-name picks another)" <<<"$msg" &&
       grep -qxF "(they hold $n_gpus GPUs: $most, the most tuned, speaks for them; --gpu-name picks another)" <<<"$out"; then
      pass=$((pass + 1))
    else
      fail=$((fail + 1)); printf 'FAIL: several GPUs in the shipped tables (%s, most %s):\n%s\n%s\n' "$n_gpus" "$most" "$msg" "$out"
    fi
    other=$(python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print([r[0] for r in c.execute('SELECT DISTINCT name FROM gpus') if r[0] != sys.argv[2]][0])" "$tables_db" "$most")
    out2=$(alone explain --seqlen 4096 --head-dim 128 --dtype bf16 --causal --gpu-name "$other" 2>&1); rc=$?
    if [ $rc -eq 0 ] && grep -q "^Floors on $other: " <<<"$out2" && ! grep -q 'the most tuned' <<<"$out2"; then
      pass=$((pass + 1))
    else
      fail=$((fail + 1)); printf 'FAIL: explain --gpu-name %s on the shipped tables (%d):\n%s\n' "$other" "$rc" "$out2"
    fi
  fi
else
  fail=$((fail + 1)); echo "FAIL: no shipped tables beside $F ($tables_db)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
