-- Schema version 4 -> 5: the devices table -- each GPU of a host a row of
-- its own under its model's gpus row, which identical GPUs share -- and
-- timings.device_id naming the one a timing ran on (NULL for every
-- version-4 timing: which GPU of the host made it is not known).
--
-- As in 3.sql: the column goes where db/schema.sql has it (after gpu_id),
-- which ALTER TABLE ADD COLUMN cannot do, so timings is rebuilt -- the old
-- table renamed aside, the new one created as db/schema.sql has it (byte for
-- byte: tests/test_db_migrate.c compares the two schemas), its rows copied
-- with their ids, so that the winners and timing_jobs rows that point at
-- them stay valid -- and the old one dropped (with its index, made anew).
-- The view that reads it is made anew. core/db.c runs this file as it runs
-- 3.sql (one transaction, foreign keys off, legacy_alter_table on, so that
-- the references to timings keep naming timings, then PRAGMA
-- foreign_key_check).

DROP VIEW timing_conditions;

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

ALTER TABLE timings RENAME TO timings_v4;
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
INSERT INTO timings (id, variant_id, gpu_id, problem_id, reps, median_ms, min_ms, max_ms,
  p10_ms, p90_ms, tflops, sm_clock_mhz, retired, created_at)
SELECT id, variant_id, gpu_id, problem_id, reps, median_ms, min_ms, max_ms,
  p10_ms, p90_ms, tflops, sm_clock_mhz, retired, created_at
FROM timings_v4 ORDER BY id;
DROP TABLE timings_v4;
CREATE INDEX timings_by_result ON timings (gpu_id, problem_id, variant_id, retired);

CREATE TRIGGER timings_device_insert BEFORE INSERT ON timings
WHEN NEW.device_id IS NOT NULL
 AND NOT EXISTS (SELECT 1 FROM devices d WHERE d.id = NEW.device_id AND d.gpu_id = NEW.gpu_id)
BEGIN
  SELECT RAISE(ABORT, 'timing device is not a device of its GPU');
END;

CREATE VIEW timing_conditions AS
SELECT t.id AS timing_id, v.name AS variant, v.source_hash,
       g.name AS gpu, g.cc_major, g.cc_minor, g.sm_count, g.driver_version,
       g.nvrtc_major, g.nvrtc_minor, d.host, d.device_index AS device, t.sm_clock_mhz,
       p.direction, p.dtype, p.mask, p.head_dim, p.batch, p.heads, p.heads_k,
       p.seqlen_q, p.seqlen_k, p.window_left, p.window_right, p.lengths,
       t.reps, t.median_ms, t.min_ms, t.p10_ms, t.p90_ms, t.max_ms, t.tflops,
       t.retired, t.created_at
FROM timings t
JOIN variants v ON v.id = t.variant_id
JOIN gpus g ON g.id = t.gpu_id
LEFT JOIN devices d ON d.id = t.device_id
JOIN problems p ON p.id = t.problem_id;

PRAGMA user_version = 5;
