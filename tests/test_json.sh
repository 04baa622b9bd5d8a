#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# --json FILE writes the run's summary for CI: on a run without a GPU,
# every field as the run left it (status 3, the variants compiled, none
# checked, the stages it reached timed and the others null, no winners),
# a rerun's builds all from the cache, and a file that cannot be written
# refused by name before any work; and the run says it has no GPU before
# it compiles. The winners' rows on a fixture database
# are test_summary_json's. $1 is the fatune binary.
set -u
F=$1
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
exec python3 - "$F" "$tmp" <<'PY'
import json, os, subprocess, sys
F, tmp = sys.argv[1], sys.argv[2]
env = dict(os.environ, FATUNE_LIBCUDA="/nonexistent")
# Three variants (d64 fp16, 32 keys a tile, two stages), two problems.
query = ["--head-dim", "64", "--dtype", "fp16", "--mask", "none", "--arch", "sm_80",
         "--param", "BLOCK_N=32,STAGES=2", "--seqlen", "512,1024", "--jobs", "2"]
db, out = os.path.join(tmp, "t.db"), os.path.join(tmp, "summary.json")
fails = []
def fail(msg):
    fails.append(msg)
    print("FAIL: " + msg)

def run(args):
    r = subprocess.run([F] + args, env=env, capture_output=True, text=True)
    return r.returncode, r.stderr

def summary():
    with open(out) as f:
        return json.load(f)

KEYS = ["format", "fatune", "status", "outcome", "database", "arch", "gpu", "no_gpu", "shard",
        "problems", "variants", "evaluations", "seconds", "winners"]
NO_GPU = ("no CUDA driver: could not load /nonexistent (/nonexistent: cannot open shared object"
          " file: No such file or directory)")
version = subprocess.run([F, "--version"], capture_output=True, text=True).stdout.split()[1]

rc, err = run(["--db", db, "--json", out] + query)
s = summary()
# Without a GPU the run says so before it compiles, not only after.
lines = err.splitlines()
early = "fatune: no GPU found: compiling only, for sm_80; checking, timing and choosing winners need an NVIDIA GPU (%s)" % NO_GPU
compiled = [i for i, l in enumerate(lines) if l.startswith("fatune: compiled ")]
if early not in lines or not compiled or lines.index(early) > compiled[0]:
    fail("no %r before the compile's summary:\n%s" % (early, err))
if rc != 3:
    fail("no-GPU run: status %d, want 3\n%s" % (rc, err))
if list(s) != KEYS:
    fail("keys %r, want %r" % (list(s), KEYS))
want = {"format": 1, "fatune": version, "status": 3, "outcome": "no_gpu", "database": db,
        "arch": "sm_80", "gpu": None, "no_gpu": NO_GPU, "shard": {"index": 1, "count": 1},
        "problems": {"total": 2, "done": 0},
        "variants": {"generated": 3, "compiled": 3, "from_cache": 0, "failed": 0},
        "evaluations": {"checked": 0, "timed": 0, "failed": 0, "resumed": 0}, "winners": []}
for k, v in want.items():
    if s.get(k) != v:
        fail("%s is %r, want %r" % (k, s.get(k), v))
sec = s["seconds"]
if list(sec) != ["generate", "compile", "ceilings", "tune", "total"]:
    fail("seconds' keys %r" % list(sec))
elif not (isinstance(sec["generate"], (int, float)) and isinstance(sec["compile"], (int, float)) and
          0 <= sec["generate"] + sec["compile"] <= sec["total"] < 600) or \
        sec["ceilings"] is not None or sec["tune"] is not None:
    fail("seconds %r: want generate and compile timed within total, ceilings and tune null" % sec)

# The rerun: every build from the cache, the file replaced whole.
rc, err = run(["--db", db, "--json", out] + query)
s = summary()
if rc != 3 or s["variants"] != {"generated": 3, "compiled": 0, "from_cache": 3, "failed": 0}:
    fail("rerun: status %d, variants %r; want 3, all 3 from the cache\n%s" % (rc, s["variants"], err))
# A shard's summary: its share of the problems (the second of two), its
# database its own.
rc, err = run(["--db", os.path.join(tmp, "shard2.db"), "--json", out, "--shard", "2/2"] + query)
s = summary()
if rc != 3 or s["shard"] != {"index": 2, "count": 2} or s["problems"] != {"total": 1, "done": 0}:
    fail("--shard 2/2: status %d, shard %r, problems %r\n%s" % (rc, s["shard"], s["problems"], err))
left = sorted(n for n in os.listdir(tmp) if n.endswith(".tmp"))
if left:
    fail("temporary files left beside the summary: %r" % left)

# Refusals name the value, exit 2, and leave nothing (no database made).
os.mkdir(os.path.join(tmp, "dir.json"))
refusals = [
    (["--json", ""], "fatune: --json: empty path"),
    (["--json", "/nonexistent-dir/x.json"],
     "fatune: --json: cannot write /nonexistent-dir/x.json: No such file or directory"),
    (["--json", os.path.join(tmp, "dir.json")],
     "fatune: --json: cannot write %s/dir.json: it exists and is not a regular file" % tmp),
    (["--json", out, "--list"], "fatune: --json writes a tuning run's summary: --list runs none"),
    (["--json", out, "--json", out], "fatune: --json given twice"),
]
fresh = os.path.join(tmp, "fresh.db")
for args, msg in refusals:
    rc, err = run(["--db", fresh] + query + args)
    if rc != 2 or err.strip().splitlines()[-1:] != [msg]:
        fail("%r: status %d, stderr %r; want 2 and %r" % (args, rc, err, msg))
if os.path.exists(fresh):
    fail("a refused --json made the database")
print("%d fields checked on a run without a GPU and its rerun, %d refusals" % (len(want) + 2, len(refusals)))
sys.exit(1 if fails else 0)
PY
