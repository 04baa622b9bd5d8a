#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Lua sandbox, through the command line: a user template folder
# (--templates) whose generator tries to run commands, read or load files
# outside its folder, load bytecode, print, exhaust memory, produce huge
# output or loop forever is stopped with exit status 1 and a message naming
# the cause, exactly, in bounded time; nothing it tried happened.
# $1 is the fatune binary.
set -u
F=$1
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
RUNAWAY_LIMIT_S=60   # the instruction cap stops a loop in about a second
D=$tmp/user          # the user template folder
mkdir -p "$D/generator" "$D/templates"
P="fatune: generator: generator/space.lua:1:"

# space 'LUA': generator/space.lua becomes LUA.
space() { printf '%s\n' "$1" >"$D/generator/space.lua"; }

# expect STATUS "FIRST LINE OF STDERR" [args]: runs fatune --templates $D --list.
expect() {
  local want_rc=$1 want_msg=$2; shift 2
  local msg rc
  msg=$(timeout "$RUNAWAY_LIMIT_S" "$F" --templates "$D" --list "$@" 2>&1 >/dev/null); rc=$?
  if [ "$rc" -eq "$want_rc" ] && [ "$(head -n 1 <<<"$msg")" = "$want_msg" ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    printf 'FAIL: space.lua: %s\n  want %d "%s"\n  got  %d "%s"\n' \
      "$(head -c 200 "$D/generator/space.lua" | tr -d '\000')" "$want_rc" "$want_msg" "$rc" "$(head -n 3 <<<"$msg")"
  fi
}

# No way to run a command, open a file or load code.
space "os.execute('touch $tmp/pwned')"
expect 1 "$P attempt to index a nil value (global 'os')"
space "io.popen('touch $tmp/pwned')"
expect 1 "$P attempt to index a nil value (global 'io')"
space "io.open('$tmp/pwned', 'w')"
expect 1 "$P attempt to index a nil value (global 'io')"
space "loadfile('/etc/passwd')"
expect 1 "$P attempt to call a nil value (global 'loadfile')"
space "dofile('/etc/passwd')"
expect 1 "$P attempt to call a nil value (global 'dofile')"
space "load('return 1')"
expect 1 "$P attempt to call a nil value (global 'load')"
space "require('os')"
expect 1 "$P attempt to call a nil value (global 'require')"
space "package.loadlib('libc.so.6', 'system')"
expect 1 "$P attempt to index a nil value (global 'package')"
space "debug.sethook()"
expect 1 "$P attempt to index a nil value (global 'debug')"
space "print('stdout belongs to the command')"
expect 1 "$P attempt to call a nil value (global 'print')"
space "fat.require('../../etc/passwd')"
expect 1 "$P bad argument #1 to 'require' (module name '../../etc/passwd' must be letters, digits and '_' only)"
space "fat.read_template('../../../etc/passwd')"
expect 1 "$P bad argument #1 to 'read_template' (template name '../../../etc/passwd' must be a file name in templates/ (no '/' or '..'))"
space "fat.read_template('/etc/passwd')"
expect 1 "$P bad argument #1 to 'read_template' (template name '/etc/passwd' must be a file name in templates/ (no '/' or '..'))"
if [ -e "$tmp/pwned" ]; then fail=$((fail + 1)); echo "FAIL: a script created $tmp/pwned"; else pass=$((pass + 1)); fi

# Precompiled chunks can crash the interpreter: text only.
printf '\033LuaT\000\031\223\r\n\032\n' >"$D/generator/space.lua"
expect 1 "fatune: generator: attempt to load a binary chunk (mode is 't')"

# Memory bombs hit the heap cap.
OOM="fatune: generator: generator: out of memory (Lua heap capped at 1073741824 bytes)"
space "local s = string.rep('x', (1 << 31) - 1)"
expect 1 "$OOM"
space "local s = 'x' while true do s = s .. s end"
expect 1 "$OOM"
space "local t = {} for i = 1, 1 << 40 do t[i] = i end"
expect 1 "$OOM"

# Runaway scripts hit the instruction cap, even when they catch its error.
LOOP="$P generator script exceeded 200000000 instructions"
space "while true do end"
expect 1 "$LOOP"
space "while true do pcall(function() while true do end end) end"
expect 1 "$LOOP"
space "local function f() return f() end f()"
expect 1 "$LOOP"
# ... and a pattern match that runs for hours inside C, where no instruction
# is counted, meets the wall-clock watchdog (shortened here).
space "local s = string.rep('a', 100000) s:find('.-.-.-.-b')"
FATUNE_GEN_TIMEOUT_S=2 expect 1 "fatune: generator: a generator script ran for more than 2 s inside a library function (string.find, string.rep, ... on huge input); stopped"

# Finalizers run with hooks off -- in a collection, or in lua_close where
# no watchdog ran, which once hung fatune forever: setmetatable refuses a
# metatable with __gc, however it was built.
GC="$P bad argument #2 to 'setmetatable' (finalizers (__gc) are not available to generator scripts)"
space "setmetatable({}, {__gc = function() while true do end end})"
FATUNE_GEN_TIMEOUT_S=5 expect 1 "$GC"
space "local mt = {} mt.__gc = function() while true do end end setmetatable({}, mt)"
FATUNE_GEN_TIMEOUT_S=5 expect 1 "$GC"
space "local s = setmetatable({}, {__index = function() return 1 end}) assert(s.x == 1) error('metatables still work')"
expect 1 "$P metatables still work"

# Huge output: a source past the cap, too many variants, a huge template file.
valid_space() {  # a space whose generate returns VARIANTS (Lua expression)
  space "return {head_dims = function() return {64} end, generate = function()
  local function v(i, source) return {name = 'fwd.x.fp16.d64.none.v' .. i, family = 'x',
    params = 'A=1', entry = 'k', source = source, direction = 'fwd', dtype = 'fp16',
    mask = 'none', head_dim = 64, block_m = 64, threads = 128, smem_bytes = 0,
    is_default = false} end
  return {variants = $1, pruned = {}} end}"
}
valid_space "{v(1, string.rep('x', 9 << 20))}"
expect 1 "fatune: generator: space.generate: variant 1: field 'source' of 9437184 bytes exceeds the cap of 8388608"
valid_space "(function() local t = {} for i = 1, 100001 do t[i] = true end return t end)()"
expect 1 "fatune: generator: space.generate: 100001 variants, more than the cap of 100000"
valid_space "{v(1, fat.read_template('huge.cu'))}"
truncate -s 17M "$D/templates/huge.cu"
expect 1 "fatune: generator: generator/space.lua:6: $D/templates/huge.cu: 17825792 bytes, more than the 16777216 a generator file may have"
rm -f "$D/templates/huge.cu"
# ... and the same space with a small source works, so the failures above are the caps.
valid_space "{v(1, 'extern \"C\" __global__ void k() {}')}"
out=$(timeout "$RUNAWAY_LIMIT_S" "$F" --templates "$D" --list --head-dim 64 --arch sm_80 2>/dev/null); rc=$?
if [ "$rc" -eq 0 ] && [ "$out" = "fwd.x.fp16.d64.none.v1  A=1  $(printf '%s' 'extern "C" __global__ void k() {}' | sha256sum | cut -c1-64)" ]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); printf 'FAIL: the small valid space: status %d, output "%s"\n' "$rc" "$out"
fi

# The head dims --head-dim accepts are the --templates folder's space's,
# however the flag is spelled (--templates=DIR once skipped the folder
# check and was checked against the built-in space).
expect 2 "fatune: --head-dim: '128' is not a head dim fatune can tune (64)" --head-dim 128
msg=$("$F" --templates="$D" --list --head-dim 128 2>&1 >/dev/null); rc=$?
if [ "$rc" -eq 2 ] && [ "$msg" = "fatune: --head-dim: '128' is not a head dim fatune can tune (64)" ]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); printf 'FAIL: --templates=DIR --head-dim 128: %d "%s"\n' "$rc" "$msg"
fi

# expect_alone STATUS "MESSAGE" args...: fatune ARGS (no --templates of expect's).
expect_alone() {
  local want_rc=$1 want_msg=$2; shift 2
  local msg rc
  msg=$(timeout "$RUNAWAY_LIMIT_S" "$F" "$@" 2>&1 >/dev/null); rc=$?
  if [ "$rc" -eq "$want_rc" ] && [ "$msg" = "$want_msg" ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); printf 'FAIL: fatune %s\n  want %d "%s"\n  got  %d "%s"\n' "$*" "$want_rc" "$want_msg" "$rc" "$msg"
  fi
}
# Folders that are not template folders, in either spelling.
expect_alone 2 "fatune: --templates: '$tmp/none' is not a folder" --templates "$tmp/none" --list
expect_alone 2 "fatune: --templates: '$tmp/none' is not a folder" --templates="$tmp/none" --list
expect_alone 2 "fatune: --templates: empty path" --templates "" --list
expect_alone 2 "fatune: --templates: empty path" --templates= --list
expect_alone 2 "fatune: --templates given twice" --templates "$D" --templates "$D" --list
rm -f "$D/generator/space.lua"
expect 1 "fatune: generator: fat.require: no generator script 'space' (generator/space.lua not found)"
# A usage error is one (exit 2), whatever the generator would have said.
expect_alone 2 "fatune: unknown option '--frobnicate' (see --help)" --templates "$D" --frobnicate
expect_alone 2 "fatune: --seqlen: 0 is out of range [1, 1048576]" --templates="$D" --seqlen 0
if "$F" --templates "$D" --help | grep -q '^Usage: fatune'; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: --help with a broken --templates folder"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
