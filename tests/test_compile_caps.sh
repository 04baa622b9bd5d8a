#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# NVRTC runs in compile processes with a time and a memory cap, and sees
# no source that would read a file: a --templates space whose variants are
# a macro bomb (one reached 24 GB once, and the OOM killer), a front end
# that runs for seconds, and an '#include "/etc/hostname"' (once copied into
# the build log) fails each of them with a message, caches none of the
# capped ones and compiles the good one; the tuner goes on and exits 3 (no
# GPU). ^C during a long compile stops the tuner with 130 once the compile
# in hand is done (NVRTC's own SIGINT handler, installed for part of each
# compile, once exited 4 or hung). $1 is the fatune binary.
set -u
F=$1
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
exec python3 - "$F" "$tmp" <<'PY'
import os, signal, sqlite3, subprocess, sys, time
F, tmp = sys.argv[1], sys.argv[2]
fails = []
def fail(msg):
    fails.append(msg)
    print("FAIL: " + msg)

def space(folder, names):
    os.makedirs(os.path.join(folder, "generator"))
    os.makedirs(os.path.join(folder, "templates"))
    sources = {
        "ok": 'extern "C" __global__ void k() {}\n',
        "bomb": "#define A(x) x x x x x x x x x x\n#define B(x) A(A(A(A(x))))\n"
                "__device__ int f(int a) { return B(B(a+)) 0; }\n",
        "slow": "__device__ int f(int a) { return " + "a+" * 50000 + "0; }\n",
        "inc": '#include "/etc/hostname"\n__global__ void k() {}\n',
    }
    for n in names:
        with open(os.path.join(folder, "templates", n + ".cu"), "w") as f:
            f.write(sources[n])
    variants = ", ".join("v('%s')" % n for n in names)
    with open(os.path.join(folder, "generator", "space.lua"), "w") as f:
        f.write("""return {head_dims = function() return {64} end, generate = function(q)
  local function v(t) return {name = 'fwd.x.fp16.d64.none.' .. t, family = 'x', params = 'A=1',
    entry = 'k', source = fat.read_template(t .. '.cu'), direction = 'fwd', dtype = 'fp16',
    mask = 'none', head_dim = 64, block_m = 64, threads = 128, smem_bytes = 0,
    is_default = false} end
  return {variants = {%s}, pruned = {}} end}
""" % variants)

env = dict(os.environ, FATUNE_LIBCUDA="/nonexistent")
query = ["--head-dim", "64", "--dtype", "fp16", "--mask", "none", "--arch", "sm_80", "--jobs", "2"]

def tune(d, db, caps):
    start = time.monotonic()
    r = subprocess.run([F, "--templates", d, "--db", db, "-v"] + query, capture_output=True,
                       text=True, env=dict(env, **caps), timeout=300)
    return r, time.monotonic() - start

def expect_lines(r, want):
    lines = r.stderr.splitlines()
    for name, msg in want.items():
        if not any(l.startswith(name + " ") and l.split(None, 1)[1] == msg for l in lines):
            fail("no line '%s %s'\n%s" % (name, msg, r.stderr))
    if r.returncode != 3:
        fail("status %d, want 3 (no GPU)\n%s" % (r.returncode, r.stderr))

def cached(db):
    c = sqlite3.connect(db)
    rows = dict((n, (ok, log)) for n, ok, log in c.execute(
        "SELECT v.name, b.ok, b.log FROM builds b JOIN variants v ON v.id = b.variant_id"))
    c.close()
    return rows

# The memory cap, shortened to 512 MiB (time enough for the bomb to reach it).
# Under AddressSanitizer its own allocator reports the cap as an error of
# its own (and ends the compile process): the bomb is left out there.
asan = "ASAN_OPTIONS" in os.environ
d = os.path.join(tmp, "caps")
space(d, ["ok", "inc"] if asan else ["ok", "bomb", "inc"])
db = os.path.join(tmp, "caps.db")
r, took = tune(d, db, {"FATUNE_COMPILE_MAX_MB": "512", "FATUNE_COMPILE_TIMEOUT_S": "200"})
want = {"fwd.x.fp16.d64.none.inc": "compilation error"}
if not asan:
    want["fwd.x.fp16.d64.none.bomb"] = ("fatune: NVRTC ran out of memory on this variant under a "
                                        "cap of 512 MiB per compile (FATUNE_COMPILE_MAX_MB); not cached")
expect_lines(r, want)
if not any(l.startswith("fwd.x.fp16.d64.none.ok ") and " compiled: " in l for l in r.stderr.splitlines()):
    fail("the good variant did not compile\n" + r.stderr)
rows = cached(db)
if sorted(rows) != ["fwd.x.fp16.d64.none.inc", "fwd.x.fp16.d64.none.ok"]:
    fail("cached builds %r: want the good one and the include's answer, no capped one" % sorted(rows))
inc = rows.get("fwd.x.fp16.d64.none.inc", (None, ""))[1]
hostname = open("/etc/hostname").read().strip() if os.path.exists("/etc/hostname") else ""
if inc != ("fatune: line 1: directive #include: a generated source is self-contained (the "
           "generator inlines templates/ includes); not compiled") or (hostname and hostname in inc):
    fail("the include's build log: %r" % inc)
# The time cap, shortened to 1 s (the front end of 'slow' takes about 2 s on
# CI's cores: a cap of 2 s let it finish first on a quiet machine).
d = os.path.join(tmp, "slow")
space(d, ["slow"])
db = os.path.join(tmp, "slow.db")
r, took2 = tune(d, db, {"FATUNE_COMPILE_TIMEOUT_S": "1"})
expect_lines(r, {"fwd.x.fp16.d64.none.slow": "fatune: NVRTC ran for more than 1 s on this "
                 "variant and was stopped (FATUNE_COMPILE_TIMEOUT_S); not cached"})
if cached(db):
    fail("a build stopped by the time cap was cached")
took += took2
print("caps: bomb and slow stopped, include refused, in %.1f s" % took)

# ^C in the middle of a long compile (the front end of 'slow' takes
# seconds, under NVRTC's own handler), to the whole process group as from
# a terminal: 130, "fatune: interrupted" last.
d = os.path.join(tmp, "sigint")
space(d, ["slow"])
db = os.path.join(tmp, "sigint.db")
p = subprocess.Popen([F, "--templates", d, "--db", db] + query, env=env,
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                     preexec_fn=lambda: (os.setsid(), signal.signal(signal.SIGINT, signal.SIG_DFL)))
time.sleep(1.0)
if p.poll() is not None:
    fail("the tuner ended (status %d) before SIGINT" % p.returncode)
else:
    os.killpg(p.pid, signal.SIGINT)  # as a terminal's ^C: to the tuner and its children
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        fail("still running 60 s after SIGINT")
    lines = err.splitlines()
    if p.returncode != 130 or not lines or lines[-1] != "fatune: interrupted":
        fail("after SIGINT: status %d, stderr %r; want 130 and 'fatune: interrupted'" % (p.returncode, err))
    else:
        print("SIGINT during a compile: status 130")
sys.exit(1 if fails else 0)
PY
