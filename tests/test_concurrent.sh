#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Two tuners on one fresh database at once, while a third process holds the
# write lock for a while: both tuners must finish (no-GPU status 3, no
# storage error), the lock holder must not make either fail (the busy
# timeout waits), and the database must end with every variant's build
# exactly once and pass PRAGMA integrity_check. Then the window where that
# holder once made a tuner fail (CI, under the sanitizers): a database
# still in rollback mode while another connection holds the write lock,
# where SQLite fails the switch to WAL at once instead of calling the busy
# handler; the tuner must wait for the lock there too. And a merge into a
# target locked past the busy timeout says so, naming the target. $1 is
# the fatune binary.
set -u
F=$1
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
exec python3 - "$F" "$tmp" "$(dirname "$0")/../db/tables/nvidia-h200.sql" <<'PY'
import os, sqlite3, subprocess, sys, time
F, tmp, table = sys.argv[1], sys.argv[2], sys.argv[3]
LOCK_HOLD_S = 3.0    # well under the tuner's 10 s busy timeout (db.h)
LOCK_AFTER_S = 1.0   # take the lock once both tuners are compiling
db = os.path.join(tmp, "shared.db")
query = ["--head-dim", "64", "--dtype", "fp16", "--mask", "none", "--arch", "sm_80", "--jobs", "1"]
env = dict(os.environ, FATUNE_LIBCUDA="/nonexistent")
fails = []
def fail(msg):
    fails.append(msg)
    print("FAIL: " + msg)

total = len(subprocess.run([F, "--list"] + query, capture_output=True, text=True,
                           env=env).stdout.splitlines())
procs = [subprocess.Popen([F, "--db", db] + query, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True) for _ in range(2)]
time.sleep(LOCK_AFTER_S)
# A writer that sits on the lock: the tuners' commits must wait, not fail.
holder = sqlite3.connect(db, timeout=30, isolation_level=None)
holder.execute("BEGIN IMMEDIATE")
held_at = time.monotonic()
time.sleep(LOCK_HOLD_S)
holder.execute("COMMIT")
holder.close()
held = time.monotonic() - held_at
for i, p in enumerate(procs):
    _, err = p.communicate(timeout=600)
    if p.returncode != 3:
        fail("tuner %d: status %d, want 3\n%s" % (i + 1, p.returncode, err))
    bad = [l for l in err.splitlines() if l.startswith("fatune: ") and
           ("storing" in l or "database" in l or "locked" in l or "busy" in l)]
    if bad:
        fail("tuner %d reported: %s" % (i + 1, bad))
c = sqlite3.connect(db)
ic = c.execute("PRAGMA integrity_check").fetchall()
rows, keys, built = c.execute(
    "SELECT count(*), count(DISTINCT key), count(DISTINCT variant_id) FROM builds").fetchone()
variants = c.execute("SELECT count(*) FROM variants").fetchone()[0]
c.close()
if ic != [("ok",)]:
    fail("integrity_check: %r" % ic)
if total < 30 or (rows, keys, built, variants) != (total, total, total, total):
    fail("%d builds, %d keys, %d variants built, %d variants; want %d of each" %
         (rows, keys, built, variants, total))
print("2 tuners on one database, write lock held %.1f s in between: %d builds, each once" % (held, rows))

# The same database back in rollback mode, its write lock held: opening it
# switches it to WAL, which must wait for the lock like any write.
c = sqlite3.connect(db, isolation_level=None)
mode = c.execute("PRAGMA journal_mode = DELETE").fetchone()[0]
c.close()
if mode != "delete":
    fail("could not put the database back in rollback mode: %s" % mode)
holder = sqlite3.connect(db, timeout=30, isolation_level=None)
holder.execute("BEGIN IMMEDIATE")
p = subprocess.Popen([F, "--db", db] + query, env=env, stdout=subprocess.DEVNULL,
                     stderr=subprocess.PIPE, text=True)
time.sleep(LOCK_HOLD_S)
still_waiting = p.poll() is None
holder.execute("COMMIT")
holder.close()
_, err = p.communicate(timeout=600)
if not still_waiting or p.returncode != 3:
    fail("tuner on a locked rollback-mode database: status %s after the lock was %s, want 3 after it "
         "waited\n%s" % (p.returncode, "held" if not still_waiting else "released", err))
c = sqlite3.connect(db)
mode = c.execute("PRAGMA journal_mode").fetchone()[0]
c.close()
if mode != "wal":
    fail("journal mode after the tuner: %s, want wal" % mode)
print("a tuner on a rollback-mode database with the write lock held %.1f s: status %d, journal %s" %
      (LOCK_HOLD_S, p.returncode, mode))

# A merge into a target whose write lock another process holds past the
# busy timeout: the message names the target and why (it once named the
# source), exit 1, and the target is left as it was.
src = os.path.join(tmp, "src.db")
target = os.path.join(tmp, "target.db")
r = subprocess.run([F, "import", "--db", src, table], capture_output=True, text=True, env=env)
if r.returncode != 0:
    fail("could not make a source to merge: %s" % r.stderr)
subprocess.run([F, "retire-stale", "--db", target], capture_output=True, env=env)
holder = sqlite3.connect(target, timeout=30, isolation_level=None)
holder.execute("BEGIN IMMEDIATE")
r = subprocess.run([F, "merge", "--db", target, src], capture_output=True, text=True, env=env,
                   timeout=120)
holder.execute("ROLLBACK")
rows = holder.execute("SELECT count(*) FROM variants").fetchone()[0]
holder.close()
want = ("fatune merge: %s: cannot merge into %s: database is locked (another process held its "
        "write lock past the busy timeout)" % (src, target))
if r.returncode != 1 or r.stderr.strip() != want or rows:
    fail("merge into a locked target: status %d, %r, %d rows; want 1, %r, 0 rows" %
         (r.returncode, r.stderr.strip(), rows, want))
else:
    print("merge into a locked target: refused naming it")
sys.exit(1 if fails else 0)
PY
