#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# SIGINT stops the tuner cleanly: sent during compilation (no GPU), the
# tuner lets the variants in flight finish and commits them, prints its
# summary and then "fatune: interrupted" as the last line of stderr, and
# exits with status 130 within a bounded time; SIGTERM to the run's whole
# process group (a scheduler's preemption) likewise, with "fatune:
# interrupted by SIGTERM" and status 143. The database passes
# PRAGMA integrity_check, and a rerun takes every stored build from the
# cache. $1 is the fatune binary.
set -u
F=$1
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
exec python3 - "$F" "$tmp" "$(dirname "$0")/../db/tables/nvidia-h200.sql" <<'PY'
import json, os, re, signal, sqlite3, subprocess, sys, time
F, tmp, table = sys.argv[1], sys.argv[2], sys.argv[3]
MIN_BUILDS = 3        # send the signal once this many builds are committed
STOP_WITHIN_S = 30    # in-flight compiles take about a second each
db = os.path.join(tmp, "sigint.db")
query = ["--head-dim", "64", "--dtype", "fp16", "--mask", "none", "--arch", "sm_80", "--jobs", "2"]
env = dict(os.environ, FATUNE_LIBCUDA="/nonexistent")
fails = []
def fail(msg):
    fails.append(msg)
    print("FAIL: " + msg)

def builds():
    if not os.path.exists(db):
        return 0
    c = sqlite3.connect(db, timeout=30)
    try:
        return c.execute("SELECT count(*) FROM builds").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        c.close()

total = len(subprocess.run([F, "--list"] + query, capture_output=True, text=True,
                           env=env).stdout.splitlines())

def stop_run(sig, status, last_line, group, outcome):
    """Starts a run on a fresh database, sends SIG once MIN_BUILDS builds
    are committed (to the run's whole process group when GROUP, as a batch
    scheduler does, its compile servers included), and checks the stop and
    the run's --json summary (OUTCOME, the builds it stored)."""
    name = signal.Signals(sig).name
    if os.path.exists(db):
        for side in ("", "-wal", "-shm"):
            if os.path.exists(db + side):
                os.remove(db + side)
    # The signal at its default disposition, as from a terminal (a
    # background job of a script would inherit SIGINT ignored).
    summary = os.path.join(tmp, "summary.json")
    p = subprocess.Popen([F, "--db", db, "--json", summary] + query, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=group,
                         preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    start = time.monotonic()
    while builds() < MIN_BUILDS and p.poll() is None and time.monotonic() - start < 300:
        time.sleep(0.05)
    if p.poll() is not None:
        fail("the tuner finished (status %d) before %s could be sent" % (p.returncode, name))
        return
    if group:
        os.killpg(p.pid, sig)
    else:
        p.send_signal(sig)
    sent = time.monotonic()
    try:
        _, err = p.communicate(timeout=STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        fail("still running %d s after %s" % (STOP_WITHIN_S, name))
    took = time.monotonic() - sent
    lines = err.splitlines()
    if p.returncode != status:
        fail("status %d after %s, want %d" % (p.returncode, name, status))
    if not lines or lines[-1] != last_line:
        fail("%s: last line of stderr is %r, want %r\n%s" % (name, lines[-1] if lines else "", last_line, err))
    if not any(l.startswith("fatune: compiled ") for l in lines):
        fail("%s: no summary ('fatune: compiled ...') before the interruption\n%s" % (name, err))
    # Every compile in flight finished and was stored: none failed (a
    # compile server killed by the signal would leave a failed build).
    if not any(re.fullmatch(r"fatune: compiled \d+ variants .*, 0 from the cache, 0 failed", l) for l in lines):
        fail("%s: a build failed or none was summed up\n%s" % (name, err))
    c = sqlite3.connect(db)
    ic = c.execute("PRAGMA integrity_check").fetchall()
    n = c.execute("SELECT count(*) FROM builds").fetchone()[0]
    c.close()
    if ic != [("ok",)]:
        fail("%s: integrity_check: %r" % (name, ic))
    if not MIN_BUILDS <= n < total:
        fail("%s: %d builds stored; want between %d and %d" % (name, n, MIN_BUILDS, total - 1))
    with open(summary) as f:
        s = json.load(f)
    got = (s["status"], s["outcome"], s["variants"]["compiled"], s["variants"]["failed"])
    if got != (status, outcome, n, 0):
        fail("%s: --json has status, outcome, compiled, failed %r; want %r" % (name, got, (status, outcome, n, 0)))
    r = subprocess.run([F, "--db", db] + query, env=env, capture_output=True, text=True)
    m = re.search(r"^fatune: compiled (\d+) variants .*, (\d+) from the cache, 0 failed$", r.stderr, re.M)
    if r.returncode != 3 or not m or (int(m.group(1)), int(m.group(2))) != (total - n, n):
        fail("%s, rerun: status %d, want 3 with %d compiled and %d from the cache\n%s" %
             (name, r.returncode, total - n, n, r.stderr))
    print("%s after %d builds: stopped in %.1f s with status %d, %d builds kept" %
          (name, MIN_BUILDS, took, p.returncode, n))

stop_run(signal.SIGINT, 130, "fatune: interrupted", group=False, outcome="interrupted")
# SIGTERM, what a batch scheduler sends before it preempts a job, stops
# the run as ^C does; sent to the whole group as schedulers send it.
stop_run(signal.SIGTERM, 143, "fatune: interrupted by SIGTERM", group=True, outcome="terminated")

# SIGINT during an import, once its scratch database exists: status 130,
# "fatune import: interrupted" last, the scratch database removed (three
# kills once left 112 MB in $TMPDIR) and not a row in the target.
scratch = os.path.join(tmp, "scratch")
os.mkdir(scratch)
target = os.path.join(tmp, "import.db")
p = subprocess.Popen([F, "import", "--db", target, table], env=dict(env, TMPDIR=scratch),
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
start = time.monotonic()
while not os.listdir(scratch) and p.poll() is None and time.monotonic() - start < 60:
    time.sleep(0.002)
if p.poll() is not None:
    fail("the import finished (status %d) before SIGINT could be sent" % p.returncode)
else:
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=STOP_WITHIN_S)
    lines = err.splitlines()
    if p.returncode != 130 or not lines or lines[-1] != "fatune import: interrupted":
        fail("import after SIGINT: status %d, stderr %r; want 130, 'fatune import: interrupted'" % (p.returncode, err))
    if os.listdir(scratch):
        fail("an interrupted import left %r in $TMPDIR" % os.listdir(scratch))
    c = sqlite3.connect(target)
    rows = c.execute("SELECT (SELECT count(*) FROM gpus) + (SELECT count(*) FROM variants)").fetchone()[0]
    c.close()
    if rows:
        fail("an interrupted import left %d rows in the target" % rows)
    print("SIGINT during an import: status %d, nothing left behind" % p.returncode)
sys.exit(1 if fails else 0)
PY
