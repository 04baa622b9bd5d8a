#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Crash safety without a GPU: the tuner is killed with SIGKILL at seeded
# random points while it compiles and commits builds one by one. After every
# kill the database must pass PRAGMA integrity_check and still hold every
# build that was visible (committed) just before the kill; a final run must
# compile only what is missing -- its "N from the cache" equals the rows
# present -- and end with every variant's build exactly once, the rows kept
# from before untouched. $1 is the fatune binary.
# FATUNE_CRASH_SEED picks other kill points (default 20240601).
set -u
F=$1
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
exec python3 - "$F" "$tmp" "${FATUNE_CRASH_SEED:-20240601}" <<'PY'
import os, random, re, signal, sqlite3, subprocess, sys, time
F, tmp, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
KILLS = 8               # SIGKILLs per test run
MAX_STEP = 6            # a kill lands after 1..MAX_STEP more builds are committed
MAX_EXTRA_S = 0.4       # ... plus up to this long, to land mid-commit too
RUN_LIMIT_S = 600       # no single run may take longer
db = os.path.join(tmp, "crash.db")
query = ["--head-dim", "64", "--dtype", "fp16,bf16", "--mask", "none", "--arch", "sm_80", "--jobs", "2"]
env = dict(os.environ, FATUNE_LIBCUDA="/nonexistent")  # no GPU, even on a GPU machine
rng = random.Random(seed)
fails = []

def fail(msg):
    fails.append(msg)
    print("FAIL: " + msg)

def keys():
    """{build key: created_at} of the committed builds (empty before the file exists)."""
    if not os.path.exists(db):
        return {}
    c = sqlite3.connect(db, timeout=30)
    try:
        return dict(c.execute("SELECT key, created_at FROM builds").fetchall())
    except sqlite3.OperationalError:  # schema not created yet
        return {}
    finally:
        c.close()

def integrity():
    c = sqlite3.connect(db, timeout=30)
    try:
        return c.execute("PRAGMA integrity_check").fetchall()
    finally:
        c.close()

listing = subprocess.run([F, "--list"] + query, capture_output=True, text=True, env=env)
total = len(listing.stdout.splitlines())
if listing.returncode != 0 or total < 30:
    print("FAIL: --list gave status %d and %d variants" % (listing.returncode, total))
    sys.exit(1)

hits = 0
seen = {}
for k in range(KILLS):
    p = subprocess.Popen([F, "--db", db] + query, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    start = time.monotonic()
    if k == 0:
        # the first kill lands while the database is being created
        time.sleep(rng.uniform(0.0, 0.3))
        target = 0
    else:
        target = len(seen) + rng.randint(1, MAX_STEP)
    before = keys()
    while len(before) < target and p.poll() is None and time.monotonic() - start < RUN_LIMIT_S:
        time.sleep(0.05)
        before = keys()
    time.sleep(rng.uniform(0.0, MAX_EXTRA_S))
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
        hits += 1
    rc = p.wait()
    if rc not in (-signal.SIGKILL, 3):
        fail("run %d ended with status %d" % (k + 1, rc))
    ic = integrity()
    if ic != [("ok",)]:
        fail("after kill %d: integrity_check says %r" % (k + 1, ic))
    after = keys()
    lost = set(before) - set(after)
    if lost:
        fail("kill %d lost %d committed builds" % (k + 1, len(lost)))
    shrunk = set(seen) - set(after)
    if shrunk:
        fail("kill %d: %d builds of earlier runs are gone" % (k + 1, len(shrunk)))
    print("kill %d: %s, %d builds before the kill, %d after" %
          (k + 1, "SIGKILL" if rc == -signal.SIGKILL else "finished first", len(before), len(after)))
    seen = after
    if len(seen) >= total:
        break

# Most kills must land on a running tuner, or the test proves little.
if hits < KILLS - 1:
    fail("only %d of %d kills hit a running tuner" % (hits, KILLS))

present = keys()
r = subprocess.run([F, "--db", db] + query, env=env, capture_output=True, text=True)
if r.returncode != 3:
    fail("final run: status %d, want 3\n%s" % (r.returncode, r.stderr))
m = re.search(r"^fatune: compiled (\d+) variants in [0-9.]+ s on 2 threads, (\d+) from the cache, 0 failed$",
              r.stderr, re.M)
if not m:
    fail("final run: no summary line in\n" + r.stderr)
elif (int(m.group(1)), int(m.group(2))) != (total - len(present), len(present)):
    fail("final run compiled %s and took %s from the cache; want %d and %d" %
         (m.group(1), m.group(2), total - len(present), len(present)))
c = sqlite3.connect(db)
rows, distinct_keys, distinct_variants = c.execute(
    "SELECT count(*), count(DISTINCT key), count(DISTINCT variant_id) FROM builds").fetchone()
n_variants = c.execute("SELECT count(*) FROM variants").fetchone()[0]
c.close()
if (rows, distinct_keys, distinct_variants, n_variants) != (total, total, total, total):
    fail("final database: %d builds, %d keys, %d variants built, %d variants; want %d of each" %
         (rows, distinct_keys, distinct_variants, n_variants, total))
final = keys()
rewritten = [key for key in present if final.get(key) != present[key]]
if rewritten:
    fail("the final run rewrote %d builds it had in the cache" % len(rewritten))
if integrity() != [("ok",)]:
    fail("final database fails integrity_check")
print("kills survived: %d (seed %d), %d builds resumed, %d compiled in the final run" %
      (hits, seed, len(present), total - len(present)))
sys.exit(1 if fails else 0)
PY
