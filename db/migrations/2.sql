-- Schema version 1 -> 2: problems gain the local mask's window
-- (window_left, window_right: 0, 0 for every version-1 problem, none of
-- which is local) as part of their key, and problems and variants admit
-- mask 'local'.
--
-- SQLite cannot alter a CHECK constraint, so both tables are rebuilt
-- (https://sqlite.org/lang_altertable.html#otheralter): the old one renamed
-- aside, the new one created as db/schema.sql has it (byte for byte:
-- tests/test_db_migrate.c compares the two schemas), its rows copied with
-- their ids -- the rows of builds, checks, timings, winners and
-- external_timings that reference them stay valid -- and the old one
-- dropped with its index. The view that reads both is made anew.
--
-- tuner/db.c runs this file in one transaction taken with the write lock,
-- with foreign keys off (with them on, dropping a table that others
-- reference deletes its rows first, which their constraints refuse) and
-- legacy_alter_table on (so that renaming a table aside leaves the
-- REFERENCES clauses of the other tables naming the new one), then runs
-- PRAGMA foreign_key_check, and commits only if it finds nothing.

DROP VIEW timing_conditions;

ALTER TABLE variants RENAME TO variants_v1;
CREATE TABLE variants (
  id          INTEGER PRIMARY KEY,
  name        TEXT    NOT NULL CHECK (length(name) > 0),
  family      TEXT    NOT NULL CHECK (length(family) > 0),
  direction   TEXT    NOT NULL CHECK (direction IN ('fwd', 'bwd')),
  dtype       TEXT    NOT NULL CHECK (dtype IN ('fp16', 'bf16')),
  mask        TEXT    NOT NULL CHECK (mask IN ('none', 'causal', 'local')),
  -- Tensor-core k-steps and 16-byte loads need multiples of 8.
  head_dim    INTEGER NOT NULL CHECK (head_dim BETWEEN 8 AND 256 AND head_dim % 8 = 0),
  params      TEXT    NOT NULL,           -- canonical, sorted: "BLOCK_M=128 BLOCK_N=64 STAGES=2 WARPS=4"
  entry       TEXT    NOT NULL CHECK (length(entry) > 0),  -- extern "C" kernel symbol
  block_m     INTEGER NOT NULL CHECK (block_m > 0),        -- grid.x = ceil(seqlen_q / block_m)
  threads     INTEGER NOT NULL CHECK (threads BETWEEN 32 AND 1024 AND threads % 32 = 0),
  smem_bytes  INTEGER NOT NULL CHECK (smem_bytes >= 0),    -- dynamic shared memory per block
  source_hash TEXT    NOT NULL CHECK (length(source_hash) = 64 AND source_hash NOT GLOB '*[^0-9a-f]*'),
  source      TEXT    NOT NULL CHECK (length(source) > 0),
  is_default  INTEGER NOT NULL DEFAULT 0 CHECK (is_default IN (0, 1)),  -- the untuned baseline
  created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  UNIQUE (name, source_hash)
);
INSERT INTO variants (id, name, family, direction, dtype, mask, head_dim, params, entry, block_m, threads,
  smem_bytes, source_hash, source, is_default, created_at)
SELECT id, name, family, direction, dtype, mask, head_dim, params, entry, block_m, threads,
  smem_bytes, source_hash, source, is_default, created_at
FROM variants_v1 ORDER BY id;
DROP TABLE variants_v1;
CREATE INDEX variants_by_problem ON variants (direction, dtype, mask, head_dim);

ALTER TABLE problems RENAME TO problems_v1;
CREATE TABLE problems (
  id        INTEGER PRIMARY KEY,
  direction TEXT    NOT NULL CHECK (direction IN ('fwd', 'bwd')),
  dtype     TEXT    NOT NULL CHECK (dtype IN ('fp16', 'bf16')),
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
  CHECK (mask = 'local' OR (window_left = 0 AND window_right = 0)),
  -- A window unbounded on both sides is no mask: tune mask 'none'.
  CHECK (mask <> 'local' OR window_left >= 0 OR window_right >= 0),
  UNIQUE (direction, dtype, mask, head_dim, batch, heads, heads_k, seqlen_q, seqlen_k,
          window_left, window_right)
);
INSERT INTO problems (id, direction, dtype, mask, head_dim, batch, heads, heads_k, seqlen_q, seqlen_k)
SELECT id, direction, dtype, mask, head_dim, batch, heads, heads_k, seqlen_q, seqlen_k
FROM problems_v1 ORDER BY id;
DROP TABLE problems_v1;

CREATE VIEW timing_conditions AS
SELECT t.id AS timing_id, v.name AS variant, v.source_hash,
       g.name AS gpu, g.cc_major, g.cc_minor, g.sm_count, g.driver_version,
       g.nvrtc_major, g.nvrtc_minor, t.sm_clock_mhz,
       p.direction, p.dtype, p.mask, p.head_dim, p.batch, p.heads, p.heads_k,
       p.seqlen_q, p.seqlen_k, p.window_left, p.window_right,
       t.reps, t.median_ms, t.min_ms, t.p10_ms, t.p90_ms, t.max_ms, t.tflops,
       t.retired, t.created_at
FROM timings t
JOIN variants v ON v.id = t.variant_id
JOIN gpus g ON g.id = t.gpu_id
JOIN problems p ON p.id = t.problem_id;

PRAGMA user_version = 2;
