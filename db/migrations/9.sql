-- Schema version 8 -> 9: 'fp16-e4m3kv' and 'bf16-e4m3kv' are dtypes (issue
-- 24: an fp8 K/V cache for decoding). A variant or problem of either reads
-- Q in the 16-bit type and K and V in e4m3 with descale factors, and writes
-- O in the 16-bit type; like e4m3 they have no backward, so the tables
-- refuse a row of direction 'bwd' of any dtype but fp16 and bf16 (the
-- CHECK that named e4m3 alone now names the two with a backward). No row
-- changes: every version-8 row is fp16, bf16 or e4m3, and e4m3's are of
-- the forward.
--
-- As in 6.sql to 8.sql: SQLite cannot alter a CHECK constraint, so both
-- tables are rebuilt -- each renamed aside, made anew as db/schema.sql has
-- it (byte for byte: tests/test_db_migrate.c compares the two schemas), its
-- rows copied with their ids, so that the builds, checks, timings, winners
-- and external_timings that reference them stay valid -- and the old one
-- dropped (variants' index with it, made anew). The view that reads them
-- is made anew. core/db.c runs this file as it runs 8.sql (one
-- transaction, foreign keys off, legacy_alter_table on, then PRAGMA
-- foreign_key_check).

DROP VIEW timing_conditions;

ALTER TABLE variants RENAME TO variants_v8;
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
INSERT INTO variants (id, name, family, direction, dtype, mask, head_dim, params, entry,
  block_m, threads, smem_bytes, source_hash, source, is_default, created_at)
SELECT id, name, family, direction, dtype, mask, head_dim, params, entry,
  block_m, threads, smem_bytes, source_hash, source, is_default, created_at
FROM variants_v8 ORDER BY id;
DROP TABLE variants_v8;
CREATE INDEX variants_by_problem ON variants (direction, dtype, mask, head_dim);

ALTER TABLE problems RENAME TO problems_v8;
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
INSERT INTO problems (id, direction, dtype, mask, head_dim, batch, heads, heads_k, seqlen_q, seqlen_k,
  window_left, window_right, lengths, page_size)
SELECT id, direction, dtype, mask, head_dim, batch, heads, heads_k, seqlen_q, seqlen_k,
  window_left, window_right, lengths, page_size
FROM problems_v8 ORDER BY id;
DROP TABLE problems_v8;

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

PRAGMA user_version = 9;
