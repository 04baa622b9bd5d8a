-- Frozen copy of db/schema.sql at schema version 9 (git show 002185c:db/schema.sql):
-- tests/test_db_migrate.c builds version-9 databases from it. Never edit.
-- fatune's tuning database, schema version 9 (PRAGMA user_version).
--
-- Why it looks like this: every compile, check and timing is kept as it is
-- made (one row, one commit), so an interrupted run resumes and adding a
-- variant to the space needs only the new variant measured. Rows are keyed by
-- natural keys that mean the same on every machine -- variants by
-- (name, source_hash), builds by their cache key, GPUs by (name, compute
-- capability, SM count, driver, NVRTC) -- so tables exported from one machine
-- merge into another. CHECK constraints mirror the generator's ranges: a row
-- the generator could not have produced is refused, never stored.
--
-- core/db.c applies this file in one transaction to a database whose
-- user_version is 0, upgrades an older version with db/migrations/ (one
-- file per version, each in one transaction), and refuses a newer one.
-- Changing a table means a new version number and a migration, and
-- tests/test_db_migrate.c proves the migrated schema is this one.
--
-- Version 2: problems carry the local mask's window (window_left,
-- window_right), part of their key; 'local' is a mask.
-- Version 3: problems carry a variable-length profile (lengths), part of
-- their key.
-- Version 4: timing_jobs records which timings were taken together (the
-- close contenders re-timed interleaved), so that a winner is decided among
-- timings of one job.
-- Version 5: devices, one row per GPU of a host under its model's gpus row,
-- and timings name theirs (device_id).
-- Version 6: a variant's source may be NULL -- not stored: a table file
-- carries each variant's source_hash alone, and import fills the source in
-- from the generator where it reproduces that hash.
-- Version 7: problems carry a paged K/V cache's page size (page_size),
-- part of their key.
-- Version 8: 'e4m3' is a dtype of variants and problems (fp8 inputs with
-- descale factors, O in bf16), of the forward only.
-- Version 9: 'fp16-e4m3kv' and 'bf16-e4m3kv' are dtypes of variants and
-- problems (an fp8 K/V cache: Q and O in the 16-bit type, K and V in e4m3
-- with descale factors), of the forward only.

PRAGMA user_version = 9;

-- The GPU a measurement was made on, with everything that can change a
-- timing: a driver or NVRTC upgrade is a different row.
CREATE TABLE gpus (
  id                   INTEGER PRIMARY KEY,
  name                 TEXT    NOT NULL CHECK (length(name) > 0),
  cc_major             INTEGER NOT NULL CHECK (cc_major >= 1),
  cc_minor             INTEGER NOT NULL CHECK (cc_minor >= 0),
  sm_count             INTEGER NOT NULL CHECK (sm_count > 0),
  driver_version       INTEGER NOT NULL CHECK (driver_version > 0),  -- cuDriverGetVersion: 13000
  nvrtc_major          INTEGER NOT NULL CHECK (nvrtc_major > 0),
  nvrtc_minor          INTEGER NOT NULL CHECK (nvrtc_minor >= 0),
  -- Informational, not part of the key; refreshed each time the GPU is seen.
  mem_bytes            INTEGER NOT NULL CHECK (mem_bytes >= 0),
  smem_per_block_optin INTEGER NOT NULL CHECK (smem_per_block_optin >= 0),
  l2_bytes             INTEGER NOT NULL CHECK (l2_bytes >= 0),
  clock_khz            INTEGER NOT NULL CHECK (clock_khz >= 0),      -- max SM clock
  mem_clock_khz        INTEGER NOT NULL CHECK (mem_clock_khz >= 0),
  first_seen           TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  UNIQUE (name, cc_major, cc_minor, sm_count, driver_version, nvrtc_major, nvrtc_minor)
);

-- One GPU of a host, as the runs that measured on it saw it. GPUs of one
-- model share their gpus row -- the key their winners are stored and looked
-- up by, so that the identical GPUs of a host tune one table between them
-- -- and each has its own row here: a timing names its device
-- (timings.device_id), so that which GPU measured what, at which clocks,
-- stays known. The rows are the host's own: export, import and merge carry
-- none.
CREATE TABLE devices (
  id            INTEGER PRIMARY KEY,
  gpu_id        INTEGER NOT NULL REFERENCES gpus (id),
  host          TEXT    NOT NULL CHECK (length(host) > 0),   -- gethostname()
  device_index  INTEGER NOT NULL CHECK (device_index >= 0),  -- the CUDA ordinal the run saw (--gpu)
  -- Informational, not part of the key; refreshed each time the device is seen.
  mem_bytes     INTEGER NOT NULL CHECK (mem_bytes >= 0),
  clock_khz     INTEGER NOT NULL CHECK (clock_khz >= 0),     -- max SM clock
  mem_clock_khz INTEGER NOT NULL CHECK (mem_clock_khz >= 0),
  first_seen    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  last_seen     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  UNIQUE (gpu_id, host, device_index)
);

-- One generated kernel. The full source is kept: the runtime compiles from
-- it when no cubin fits, and its hash is what makes a stored result valid
-- (a template change gives a new hash, hence a new row with no results).
-- NULL only for a variant that came from a table file (which carries no
-- sources) and that the generator here no longer reproduces: a stale one
-- kept for `fatune rehash` (build_tables --keep-stale). Nothing compiles
-- it or serves it until rehash gives it today's source.
CREATE TABLE variants (
  id          INTEGER PRIMARY KEY,
  name        TEXT    NOT NULL CHECK (length(name) > 0),
  family      TEXT    NOT NULL CHECK (length(family) > 0),
  direction   TEXT    NOT NULL CHECK (direction IN ('fwd', 'bwd')),
  -- e4m3: fp8 inputs, O in bf16 (core/types.h's fat_dtype_out); fp16-e4m3kv,
  -- bf16-e4m3kv: an fp8 K/V cache, Q and O in the 16-bit type. Only the
  -- 16-bit dtypes have a backward.
  dtype       TEXT    NOT NULL CHECK (dtype IN ('fp16', 'bf16', 'e4m3', 'fp16-e4m3kv', 'bf16-e4m3kv')),
  mask        TEXT    NOT NULL CHECK (mask IN ('none', 'causal', 'local')),
  -- Tensor-core k-steps and 16-byte loads need multiples of 8.
  head_dim    INTEGER NOT NULL CHECK (head_dim BETWEEN 8 AND 256 AND head_dim % 8 = 0),
  params      TEXT    NOT NULL,           -- canonical, sorted: "BLOCK_M=128 BLOCK_N=64 STAGES=2 WARPS=4"
  entry       TEXT    NOT NULL CHECK (length(entry) > 0),  -- extern "C" kernel symbol
  block_m     INTEGER NOT NULL CHECK (block_m > 0),        -- grid.x = ceil(seqlen_q / block_m)
  threads     INTEGER NOT NULL CHECK (threads BETWEEN 32 AND 1024 AND threads % 32 = 0),
  smem_bytes  INTEGER NOT NULL CHECK (smem_bytes >= 0),    -- dynamic shared memory per block
  source_hash TEXT    NOT NULL CHECK (length(source_hash) = 64 AND source_hash NOT GLOB '*[^0-9a-f]*'),
  source      TEXT    CHECK (source IS NULL OR length(source) > 0),
  is_default  INTEGER NOT NULL DEFAULT 0 CHECK (is_default IN (0, 1)),  -- the untuned baseline
  created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  CHECK (dtype IN ('fp16', 'bf16') OR direction = 'fwd'),
  UNIQUE (name, source_hash)
);
CREATE INDEX variants_by_problem ON variants (direction, dtype, mask, head_dim);

-- One NVRTC compilation, the build cache. A failed compile is kept too
-- (ok = 0, no cubin, the log says why): the same key fails the same way.
CREATE TABLE builds (
  id            INTEGER PRIMARY KEY,
  key           TEXT    NOT NULL UNIQUE
                CHECK (length(key) = 64 AND key NOT GLOB '*[^0-9a-f]*'),  -- sha256(source, arch, options, NVRTC version)
  variant_id    INTEGER NOT NULL REFERENCES variants (id),
  arch          TEXT    NOT NULL CHECK (arch GLOB 'sm_[1-9][0-9]*'),
  options       TEXT    NOT NULL,
  nvrtc_version TEXT    NOT NULL CHECK (length(nvrtc_version) > 0),        -- "13.0"
  ok            INTEGER NOT NULL CHECK (ok IN (0, 1)),
  cubin         BLOB    CHECK ((ok = 1) = (cubin IS NOT NULL AND length(cubin) > 0)),
  registers     INTEGER NOT NULL CHECK (registers >= 0),     -- per thread
  smem_static   INTEGER NOT NULL CHECK (smem_static >= 0),   -- bytes; dynamic is variants.smem_bytes
  stack_frame   INTEGER NOT NULL CHECK (stack_frame >= 0),   -- bytes
  spill_stores  INTEGER NOT NULL CHECK (spill_stores >= 0),  -- bytes
  spill_loads   INTEGER NOT NULL CHECK (spill_loads >= 0),   -- bytes
  compile_ms    REAL    NOT NULL CHECK (compile_ms >= 0),
  log           TEXT    NOT NULL DEFAULT '',
  created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX builds_by_variant ON builds (variant_id, arch);

-- An attention problem a winner is chosen for. The benchmark shapes are the
-- buckets: the runtime maps a call to the nearest tuned seqlen (and, for
-- the local mask, the nearest window).
CREATE TABLE problems (
  id        INTEGER PRIMARY KEY,
  direction TEXT    NOT NULL CHECK (direction IN ('fwd', 'bwd')),
  -- e4m3, fp16-e4m3kv and bf16-e4m3kv (fp8 inputs or K/V cache): forward only.
  dtype     TEXT    NOT NULL CHECK (dtype IN ('fp16', 'bf16', 'e4m3', 'fp16-e4m3kv', 'bf16-e4m3kv')),
  mask      TEXT    NOT NULL CHECK (mask IN ('none', 'causal', 'local')),
  head_dim  INTEGER NOT NULL CHECK (head_dim BETWEEN 8 AND 256 AND head_dim % 8 = 0),
  batch     INTEGER NOT NULL CHECK (batch > 0),
  heads     INTEGER NOT NULL CHECK (heads > 0),
  heads_k   INTEGER NOT NULL CHECK (heads_k > 0 AND heads % heads_k = 0),  -- grouped-query: heads_k divides heads
  seqlen_q  INTEGER NOT NULL CHECK (seqlen_q > 0),
  seqlen_k  INTEGER NOT NULL CHECK (seqlen_k > 0),
  -- The local mask's window: a query sees the keys from its position -
  -- window_left to its position + window_right, -1 unbounded on that side.
  -- 0, 0 for the other masks, so that each of their problems has one key.
  window_left  INTEGER NOT NULL DEFAULT 0 CHECK (window_left >= -1),
  window_right INTEGER NOT NULL DEFAULT 0 CHECK (window_right >= -1),
  -- A variable-length profile: the packed batch's sequence lengths, queries
  -- and keys alike, comma-separated ("538,2092,3976"); batch is their
  -- number and seqlen_q = seqlen_k their longest. '' for a dense batch.
  lengths      TEXT    NOT NULL DEFAULT ''
               CHECK (lengths = '' OR (lengths GLOB '[1-9]*' AND lengths NOT GLOB '*[^0-9,]*'
                      AND lengths NOT GLOB '*,' AND lengths NOT GLOB '*,,*'
                      AND lengths NOT GLOB '*,0*')),
  -- A paged K/V cache: tokens a page (a power of two from 16), K and V read
  -- through a block table of pages in random order (the paged family's
  -- problems). 0 for a contiguous cache. A forward of a dense batch only.
  page_size    INTEGER NOT NULL DEFAULT 0
               CHECK (page_size = 0 OR (page_size BETWEEN 16 AND 65536
                                        AND (page_size & (page_size - 1)) = 0)),
  CHECK (mask = 'local' OR (window_left = 0 AND window_right = 0)),
  -- A window unbounded on both sides is no mask: tune mask 'none'.
  CHECK (mask <> 'local' OR window_left >= 0 OR window_right >= 0),
  CHECK (lengths = '' OR (seqlen_q = seqlen_k
                          AND batch = length(lengths) - length(replace(lengths, ',', '')) + 1)),
  CHECK (page_size = 0 OR (direction = 'fwd' AND lengths = '')),
  CHECK (dtype IN ('fp16', 'bf16') OR direction = 'fwd'),
  UNIQUE (direction, dtype, mask, head_dim, batch, heads, heads_k, seqlen_q, seqlen_k,
          window_left, window_right, lengths, page_size)
);

-- One reference check of a variant on one GPU, for one problem (the shape
-- checked may be smaller than the problem's). SQLite stores a NaN as NULL,
-- so a NULL error means "not a number"; a passed row must be finite.
-- retired = 1: superseded by --retune, kept for history, ignored by resume
-- and winner selection.
CREATE TABLE checks (
  id          INTEGER PRIMARY KEY,
  variant_id  INTEGER NOT NULL REFERENCES variants (id),
  gpu_id      INTEGER NOT NULL REFERENCES gpus (id),
  problem_id  INTEGER NOT NULL REFERENCES problems (id),
  batch       INTEGER NOT NULL CHECK (batch > 0),
  heads       INTEGER NOT NULL CHECK (heads > 0),
  seqlen_q    INTEGER NOT NULL CHECK (seqlen_q > 0),
  seqlen_k    INTEGER NOT NULL CHECK (seqlen_k > 0),
  rel_l2      REAL    CHECK (rel_l2 >= 0),
  max_abs     REAL    CHECK (max_abs >= 0),
  lse_max_abs REAL    CHECK (lse_max_abs >= 0),
  nonfinite   INTEGER NOT NULL CHECK (nonfinite >= 0),
  passed      INTEGER NOT NULL CHECK (passed IN (0, 1)),
  reason      TEXT    NOT NULL CHECK (length(reason) > 0),
  retired     INTEGER NOT NULL DEFAULT 0 CHECK (retired IN (0, 1)),
  created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  -- NaN never passes.
  CHECK (passed = 0 OR (rel_l2 IS NOT NULL AND max_abs IS NOT NULL AND nonfinite = 0))
);
CREATE INDEX checks_by_result ON checks (gpu_id, problem_id, variant_id, retired);

-- One timing of a variant on one GPU and problem. Every timing is kept, not
-- only the winner's; a re-timing (close contenders, interleaved) adds a row
-- and the latest row counts. device_id is the GPU of the host it ran on:
-- NULL for a timing made before schema version 5 or brought in by import
-- or merge.
CREATE TABLE timings (
  id           INTEGER PRIMARY KEY,
  variant_id   INTEGER NOT NULL REFERENCES variants (id),
  gpu_id       INTEGER NOT NULL REFERENCES gpus (id),
  device_id    INTEGER REFERENCES devices (id),
  problem_id   INTEGER NOT NULL REFERENCES problems (id),
  reps         INTEGER NOT NULL CHECK (reps > 0),
  median_ms    REAL    NOT NULL CHECK (median_ms > 0),
  min_ms       REAL    NOT NULL CHECK (min_ms > 0 AND min_ms <= median_ms),
  max_ms       REAL    NOT NULL CHECK (max_ms >= median_ms),
  p10_ms       REAL    NOT NULL CHECK (p10_ms BETWEEN min_ms AND max_ms),
  p90_ms       REAL    NOT NULL CHECK (p90_ms BETWEEN min_ms AND max_ms),
  tflops       REAL    NOT NULL CHECK (tflops >= 0),
  sm_clock_mhz INTEGER NOT NULL CHECK (sm_clock_mhz >= 0),  -- seen during the run; 0: unknown
  retired      INTEGER NOT NULL DEFAULT 0 CHECK (retired IN (0, 1)),
  created_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX timings_by_result ON timings (gpu_id, problem_id, variant_id, retired);

-- A timing's device is one of its GPU's: the key a winner is stored under
-- and the GPU that measured it never disagree.
CREATE TRIGGER timings_device_insert BEFORE INSERT ON timings
WHEN NEW.device_id IS NOT NULL
 AND NOT EXISTS (SELECT 1 FROM devices d WHERE d.id = NEW.device_id AND d.gpu_id = NEW.gpu_id)
BEGIN
  SELECT RAISE(ABORT, 'timing device is not a device of its GPU');
END;

-- Timings taken together: the close contenders of a problem re-timed
-- interleaved in one worker job (round-robin, so that clocks and
-- temperature fall on them alike) share a job. A timing with no row here
-- was taken alone, right after its variant's checks -- a short burst that
-- runs at the boost clock, where a job of several variants runs at the
-- sustained one, some percent slower: the two kinds are not compared. The
-- winner rule (fat_db_decide_winner) picks the close contenders by their
-- timings alone and the winner among them by their latest common job. A
-- run's own bookkeeping: export, import and merge do not carry it (a table
-- carries its winners decided; merge has its own rule), so timings that
-- came in from elsewhere count as taken alone.
CREATE TABLE timing_jobs (
  timing_id INTEGER PRIMARY KEY REFERENCES timings (id),
  job       INTEGER NOT NULL REFERENCES timings (id)  -- the id of the job's first timing
);
CREATE INDEX timing_jobs_by_job ON timing_jobs (job);

-- The chosen variant per (GPU, problem), pointing at the timing that won.
CREATE TABLE winners (
  gpu_id     INTEGER NOT NULL REFERENCES gpus (id),
  problem_id INTEGER NOT NULL REFERENCES problems (id),
  variant_id INTEGER NOT NULL REFERENCES variants (id),
  timing_id  INTEGER NOT NULL REFERENCES timings (id),
  chosen_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  PRIMARY KEY (gpu_id, problem_id)
);

-- Nothing is trusted until checked, enforced here as well as in the tuner:
-- a winner must have passed every live check on its GPU and problem (and at
-- least one), and its timing must be a live timing of that same variant.
CREATE TRIGGER winners_checked_insert BEFORE INSERT ON winners
WHEN NOT EXISTS (SELECT 1 FROM checks c
                 WHERE c.variant_id = NEW.variant_id AND c.gpu_id = NEW.gpu_id
                   AND c.problem_id = NEW.problem_id AND c.retired = 0 AND c.passed = 1)
  OR EXISTS (SELECT 1 FROM checks c
             WHERE c.variant_id = NEW.variant_id AND c.gpu_id = NEW.gpu_id
               AND c.problem_id = NEW.problem_id AND c.retired = 0 AND c.passed = 0)
BEGIN
  SELECT RAISE(ABORT, 'winner has not passed the reference check on this GPU and problem');
END;
CREATE TRIGGER winners_timed_insert BEFORE INSERT ON winners
WHEN NOT EXISTS (SELECT 1 FROM timings t
                 WHERE t.id = NEW.timing_id AND t.variant_id = NEW.variant_id
                   AND t.gpu_id = NEW.gpu_id AND t.problem_id = NEW.problem_id AND t.retired = 0)
BEGIN
  SELECT RAISE(ABORT, 'winner timing is not a live timing of that variant on this GPU and problem');
END;
CREATE TRIGGER winners_no_update BEFORE UPDATE ON winners
BEGIN
  SELECT RAISE(ABORT, 'winners are replaced (INSERT OR REPLACE), never updated in place');
END;

-- A failed check arriving after a winner was chosen unseats it.
CREATE TRIGGER checks_failed_unseat AFTER INSERT ON checks
WHEN NEW.passed = 0 AND NEW.retired = 0
BEGIN
  DELETE FROM winners
  WHERE gpu_id = NEW.gpu_id AND problem_id = NEW.problem_id AND variant_id = NEW.variant_id;
END;

-- Every timing with the conditions it was measured under, in one row (host
-- and device NULL where the timing names no device).
CREATE VIEW timing_conditions AS
SELECT t.id AS timing_id, v.name AS variant, v.source_hash,
       g.name AS gpu, g.cc_major, g.cc_minor, g.sm_count, g.driver_version,
       g.nvrtc_major, g.nvrtc_minor, d.host, d.device_index AS device, t.sm_clock_mhz,
       p.direction, p.dtype, p.mask, p.head_dim, p.batch, p.heads, p.heads_k,
       p.seqlen_q, p.seqlen_k, p.window_left, p.window_right, p.lengths, p.page_size,
       t.reps, t.median_ms, t.min_ms, t.p10_ms, t.p90_ms, t.max_ms, t.tflops,
       t.retired, t.created_at
FROM timings t
JOIN variants v ON v.id = t.variant_id
JOIN gpus g ON g.id = t.gpu_id
LEFT JOIN devices d ON d.id = t.device_id
JOIN problems p ON p.id = t.problem_id;

-- The GPU's measured ceilings, for the roofline floors of `fatune explain`
-- and `fatune report`: what this GPU does at best, measured on it, not a
-- datasheet figure. Values are in SI base units, named by the unit column:
-- copy_bandwidth in B/s (device-to-device copy), matrix_peak_fp16 and
-- matrix_peak_bf16 in FLOP/s (tensor-core mma, fp32 accumulation). A
-- re-measurement replaces the value.
CREATE TABLE ceilings (
  id          INTEGER PRIMARY KEY,
  gpu_id      INTEGER NOT NULL REFERENCES gpus (id),
  name        TEXT    NOT NULL CHECK (length(name) > 0),
  value       REAL    NOT NULL CHECK (value > 0),
  unit        TEXT    NOT NULL CHECK (length(unit) > 0),
  measured_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  UNIQUE (gpu_id, name)
);

-- Timings of other implementations on the same GPU and problem, stored by
-- scripts/bench_sdpa.py: PyTorch's scaled_dot_product_attention backends
-- ('sdpa_flash', 'sdpa_cudnn'). They are comparisons for the report, never
-- candidates: no check, no winner. The latest row per source counts.
CREATE TABLE external_timings (
  id          INTEGER PRIMARY KEY,
  gpu_id      INTEGER NOT NULL REFERENCES gpus (id),
  problem_id  INTEGER NOT NULL REFERENCES problems (id),
  source      TEXT    NOT NULL CHECK (length(source) > 0),
  median_ms   REAL    NOT NULL CHECK (median_ms > 0),
  tflops      REAL    NOT NULL CHECK (tflops >= 0),
  measured_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX external_timings_by_problem ON external_timings (gpu_id, problem_id, source);

-- ---- Appended: cubin integrity (applied to every database at open) ----
-- The sha256 of each stored cubin, by build key. The runtime loads a stored
-- cubin only when its bytes hash to the value here (and builds.arch is the
-- GPU's architecture); a build with no row here is not trusted and its source
-- is compiled instead. It is a table of its own, not a builds column, because
-- schema.sql only grows by appending and a CREATE ... IF NOT EXISTS can be
-- applied to a version-1 database made before it: tuner/db.c runs this part
-- on every open that finds the table missing and fills it from the cubins
-- already stored there (the user's own builds, trusted as the database is).
-- Older fatune builds ignore the table, so it came without a new
-- PRAGMA user_version (it is part of version 1 and later): a build they
-- store gets no hash, and is recompiled rather than trusted.
-- A table file cannot vouch for a cubin whose bytes it does not match: import
-- checks every row here against its cubin.
CREATE TABLE IF NOT EXISTS build_hashes (
  build_key    TEXT PRIMARY KEY REFERENCES builds (key),
  cubin_sha256 TEXT NOT NULL
               CHECK (length(cubin_sha256) = 64 AND cubin_sha256 NOT GLOB '*[^0-9a-f]*')
);
