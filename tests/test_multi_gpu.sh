#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Several GPUs in one run (--gpu 0,1, --gpu all), end to end on the CPU:
# the workers start on the stand-in driver (stand_in_cuda.c, by
# FATUNE_LIBCUDA), which describes the devices FATUNE_STAND_IN_DEVICES
# lists and refuses every check at its first copy back, so that each
# (variant, problem) is measured -- and stored as one failed check -- on
# exactly one GPU of each model. Proves: a worker per GPU and a devices row
# each, identical GPUs one gpus row (one key), another model its own key
# tuning every problem too, one compile per architecture; the problems
# handed out, each tuned once a model, the log naming the GPU of each line;
# a GPU lost mid-run (FATUNE_STAND_IN_LOSE) giving its problem back to the
# other; an index past the devices, a mismatched --arch and no driver
# refused or reported as before; --gpu 0 reading as it always has; --json
# listing the devices. $1 is the fatune binary.
set -u
F=$1
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
[ -n "${FATUNE_STAND_IN_CUDA:-}" ] || { echo "no FATUNE_STAND_IN_CUDA (run from ctest): skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
exec python3 - "$F" "$tmp" <<'PY'
import json, os, re, shutil, socket, sqlite3, subprocess, sys
F, tmp = sys.argv[1], sys.argv[2]
STAND_IN = os.environ["FATUNE_STAND_IN_CUDA"]
# Four variants of one key (mma80 fp16 d64 none, 128-row tiles, four warps,
# one stage) on each architecture.
QUERY = ["--head-dim", "64", "--dtype", "fp16", "--mask", "none", "--family", "mma80",
         "--param", "BLOCK_M=128,WARPS=4,STAGES=1", "--jobs", "2"]
VARIANTS = 4
fails = []
def fail(msg):
    fails.append(msg)
    print("FAIL: " + msg)

def check(cond, msg):
    if not cond:
        fail(msg)

def run(args, devices=None, lose=None, libcuda=STAND_IN):
    env = dict(os.environ, FATUNE_LIBCUDA=libcuda)
    env.pop("FATUNE_STAND_IN_DEVICES", None)
    env.pop("FATUNE_STAND_IN_LOSE", None)
    if devices:
        env["FATUNE_STAND_IN_DEVICES"] = devices
    if lose:
        env["FATUNE_STAND_IN_LOSE"] = lose
    r = subprocess.run([F] + QUERY + args, env=env, capture_output=True, text=True)
    return r.returncode, r.stderr, r.stdout

def rows(db, sql):
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()

def seqlens(n):
    return ["--seqlen", ",".join(str(256 * (k + 1)) for k in range(n))]

# A database with both architectures' builds, compiled once without a GPU;
# each case starts from a copy of it, so that none compiles again.
base = os.path.join(tmp, "base.db")
for arch in ("sm_90a", "sm_80"):
    rc, err, _ = run(["--arch", arch, "--seqlen", "256", "--db", base], libcuda="/nonexistent")
    check(rc == 3, f"the base build for {arch} exited {rc}:\n{err}")

def fresh(name):
    path = os.path.join(tmp, name)
    shutil.copy(base, path)
    return path

HOST = socket.gethostname() or "localhost"

# ---- refusals, named ----
rc, err, _ = run(["--gpu", "0,3", "--seqlen", "256", "--db", fresh("bad.db")], devices="h200,h200")
check(rc == 2 and "fatune: --gpu 3: GPU index 3 out of range: 2 devices found\n" in err,
      f"--gpu 0,3 on two devices: {rc}\n{err}")
rc, err, _ = run(["--gpu", "all", "--arch", "sm_80", "--seqlen", "256", "--db", fresh("arch.db")],
                 devices="a100,h200")
check(rc == 2 and "fatune: --arch sm_80: GPU 1 is NVIDIA H200 (compute capability 9.0), which runs sm_90a\n" in err,
      f"--gpu all --arch sm_80 on an A100 and an H200: {rc}\n{err}")
# No driver: the run compiles only, as with one GPU.
for gpus in ("0,1", "all"):
    rc, err, _ = run(["--gpu", gpus, "--seqlen", "256", "--db", fresh("none.db")], libcuda="/nonexistent")
    check(rc == 3 and "fatune: no GPU found: compiling only, for sm_90a; checking, timing and choosing winners"
          " need an NVIDIA GPU (no CUDA driver: could not load /nonexistent (" in err,
          f"--gpu {gpus} without a driver: {rc}\n{err}")

# ---- --gpu 0: the single-GPU run's lines, no GPU named on them ----
db = fresh("one.db")
rc, err, _ = run(["--gpu", "0", "--db", db] + seqlens(2))
tail = err[err.find("fatune: tuning on"):]
want = ("fatune: tuning on NVIDIA H200 (compute capability 9.0, 132 SMs)\n"
        "fatune: measuring the GPU's ceilings: CUDA_ERROR_NOT_SUPPORTED: not supported by the"
        " stand-in driver (cuEventCreate)\n"
        "fatune: tuning fwd fp16 d64 none s256\n"
        "fatune: no variant passed for fwd fp16 d64 none s256\n"
        "fatune: tuning fwd fp16 d64 none s512\n"
        "fatune: no variant passed for fwd fp16 d64 none s512\n"
        "fatune: 8 checked and timed, 8 failed, 0 resumed from the database, S s\n"
        "fatune: tune stage T: module loads T, check buffers T, references T, check runs T,"
        " comparisons T, timing buffers T, timed runs T, worker messages T, waiting for builds T\n")
norm = re.sub(r"database, \d+ s\n", "database, S s\n", tail)
norm = re.sub(r"\d+\.\d s", "T", re.sub(r", the rest \d+\.\d s\n", "\n", norm))
check(rc == 0 and norm == want, f"--gpu 0: {rc}\n{err}")
check("compiled 0 variants in" in err and " for sm_90a in " not in err, f"--gpu 0's compile line:\n{err}")
check(rows(db, f"SELECT count(*), min(device_index), min(host) FROM devices") == [(1, 0, HOST)],
      f"--gpu 0's devices: {rows(db, 'SELECT * FROM devices')}")

# ---- two identical GPUs: one key, two devices, each problem once ----
db = fresh("two.db")
rc, err, _ = run(["--gpu", "0,1", "--db", db] + seqlens(6), devices="h200,h200")
check(rc == 0, f"--gpu 0,1: exit {rc}\n{err}")
check("fatune: tuning on NVIDIA H200 (compute capability 9.0, 132 SMs): GPU 0 and 1\n" in err,
      f"--gpu 0,1 names its GPUs:\n{err}")
tuned = re.findall(r"^fatune: GPU ([01]): tuning (fwd fp16 d64 none s\d+)$", err, re.M)
check(sorted(p for _, p in tuned) == sorted(f"fwd fp16 d64 none s{256 * (k + 1)}" for k in range(6)),
      f"--gpu 0,1: each problem tuned once: {tuned}")
check(not re.search(r"^fatune: (tuning (fwd|bwd)|no variant) ", err, re.M),
      f"--gpu 0,1: a line without its GPU:\n{err}")
check(rows(db, "SELECT count(*) FROM gpus") == [(1,)], "--gpu 0,1: identical GPUs, one gpus row")
check(rows(db, "SELECT group_concat(device_index) FROM (SELECT device_index FROM devices"
               " ORDER BY device_index)") == [("0,1",)], "--gpu 0,1: a devices row each")
check(rows(db, "SELECT count(*), count(DISTINCT variant_id || '/' || problem_id) FROM checks")
      == [(6 * VARIANTS, 6 * VARIANTS)], "--gpu 0,1: every (variant, problem) checked once: "
      f"{rows(db, 'SELECT count(*), count(DISTINCT variant_id || problem_id) FROM checks')}")
check(rows(db, "PRAGMA integrity_check") == [("ok",)], "--gpu 0,1: integrity")

# ---- --gpu all on three GPUs of two architectures and three models ----
db = fresh("all.db")
out = os.path.join(tmp, "all.json")
rc, err, _ = run(["--gpu", "all", "--db", db, "--json", out] + seqlens(2), devices="h200,a100,h100")
check(rc == 0, f"--gpu all: exit {rc}\n{err}")
for line in ("fatune: compiled 0 variants for sm_90a in ", "fatune: compiled 0 variants for sm_80 in ",
             "fatune: tuning on NVIDIA H200 (compute capability 9.0, 132 SMs): GPU 0\n",
             "fatune: tuning on NVIDIA A100-SXM4-80GB (compute capability 8.0, 108 SMs): GPU 1\n",
             "fatune: tuning on NVIDIA H100 80GB HBM3 (compute capability 9.0, 132 SMs): GPU 2\n",
             "fatune: measuring ceilings of NVIDIA A100-SXM4-80GB: CUDA_ERROR_NOT_SUPPORTED"):
    check(line in err, f"--gpu all says '{line.strip()}':\n{err}")
for g in range(3):
    check(len(re.findall(rf"^fatune: GPU {g}: tuning ", err, re.M)) == 2,
          f"--gpu all: GPU {g} tunes both problems:\n{err}")
check(rows(db, "SELECT g.name, d.device_index, count(DISTINCT c.problem_id), count(c.id) FROM gpus g"
               " JOIN devices d ON d.gpu_id = g.id JOIN checks c ON c.gpu_id = g.id"
               " GROUP BY g.id ORDER BY d.device_index")
      == [("NVIDIA H200", 0, 2, 2 * VARIANTS), ("NVIDIA A100-SXM4-80GB", 1, 2, 2 * VARIANTS),
          ("NVIDIA H100 80GB HBM3", 2, 2, 2 * VARIANTS)],
      f"--gpu all: each model its key and every problem: {rows(db, 'SELECT * FROM devices')}")
check(rows(db, "SELECT count(DISTINCT b.arch) FROM builds b") == [(2,)], "--gpu all: two architectures")
try:
    with open(out) as f:
        s = json.load(f)
    check([(d["index"], d["gpu"]["name"]) for d in s.get("devices", [])]
          == [(0, "NVIDIA H200"), (1, "NVIDIA A100-SXM4-80GB"), (2, "NVIDIA H100 80GB HBM3")]
          and s["gpu"]["name"] == "NVIDIA H200" and s["arch"] == "sm_90a"
          and s["problems"] == {"total": 2, "done": 2}
          and s["evaluations"]["checked"] == 3 * 2 * VARIANTS and s["outcome"] == "done",
          f"--gpu all's --json: {s}")
except (OSError, ValueError, KeyError) as e:
    fail(f"--gpu all's --json: {e}")

# ---- cold: the compile runs beside the tune stage ----
# No build in the database: the lanes check each variant once its build is
# stored, every build is stored by the end, and the rerun compiles nothing.
db = os.path.join(tmp, "cold.db")
rc, err, _ = run(["--gpu", "0,1", "--db", db] + seqlens(3), devices="h200,h200")
check(rc == 0 and re.search(r"^fatune: compiled 4 variants in [0-9.]+ s on 2 threads, 0 from the cache,"
                            r" 0 failed$", err, re.M) is not None, f"cold --gpu 0,1: {rc}\n{err}")
check(rows(db, "SELECT count(*) FROM builds WHERE ok = 1") == [(VARIANTS,)]
      and rows(db, "SELECT count(*), count(DISTINCT variant_id || '/' || problem_id) FROM checks")
      == [(3 * VARIANTS, 3 * VARIANTS)], "cold --gpu 0,1: every build stored, every pair checked once")
rc, err, _ = run(["--gpu", "0,1", "--db", db] + seqlens(3), devices="h200,h200")
check(rc == 0 and "fatune: compiled 0 variants in" in err and ", 4 from the cache, 0 failed" in err,
      f"cold --gpu 0,1 again: {rc}\n{err}")

# ---- a GPU lost mid-run: its problem goes back to the other ----
db = fresh("lost.db")
lost = os.path.join(tmp, "lost")
rc, err, _ = run(["--gpu", "0,1", "--db", db] + seqlens(6), devices="h200,h200", lose=f"1:{lost}")
m = re.search(r"^fatune: GPU 1 drops out: restarting its worker: no CUDA device: cuInit:"
              r" CUDA_ERROR_NO_DEVICE: the stand-in device was lost \(FATUNE_STAND_IN_LOSE\);"
              r" (fwd fp16 d64 none s\d+) goes back to the other GPUs$", err, re.M)
check(rc == 0 and m is not None, f"GPU 1 lost: {rc}\n{err}")
if m:
    check(f"fatune: GPU 0: tuning {m.group(1)}\n" in err, f"GPU 0 takes {m.group(1)} up:\n{err}")
check(rows(db, "SELECT count(*), count(DISTINCT variant_id || '/' || problem_id) FROM checks")
      == [(6 * VARIANTS, 6 * VARIANTS)], "GPU 1 lost: every (variant, problem) checked once")
check(rows(db, "SELECT count(*) FROM checks WHERE reason = 'fault: worker killed by signal 9 (Killed)'")
      == [(1,)], "GPU 1 lost: its fault stored as the check of the variant it killed")
check(re.search(r"^fatune: \d+ checked and timed, \d+ failed, 0 resumed from the database", err, re.M)
      is not None, f"GPU 1 lost: the fault GPU 0 resumes was counted once:\n{err}")

print(f"{len(fails)} failed")
sys.exit(1 if fails else 0)
PY
