-- Schema version 9 -> 10: eliminations, why each candidate that was not
-- timed in full lost when its problem's winner was decided (db/schema.sql
-- says what a row holds). A new table and its trigger only: the rows of
-- version 9 stay as they are, and a winner decided before has no
-- eliminations until it is decided again (a rerun that measures something
-- of its problem). core/db.c runs this file as it runs 2.sql to 9.sql (one
-- transaction, foreign keys off, legacy_alter_table on, then PRAGMA
-- foreign_key_check).

CREATE TABLE eliminations (
  gpu_id         INTEGER NOT NULL REFERENCES gpus (id),
  problem_id     INTEGER NOT NULL REFERENCES problems (id),
  variant_id     INTEGER NOT NULL REFERENCES variants (id),
  timing_id      INTEGER NOT NULL REFERENCES timings (id),  -- its timing that lost
  best_timing_id INTEGER NOT NULL REFERENCES timings (id),  -- the best's, by its timing alone
  ratio          REAL    NOT NULL CHECK (ratio > 0),        -- its median / the best's
  reps           INTEGER NOT NULL CHECK (reps > 0),         -- its timing's (1: a drop)
  decided_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  PRIMARY KEY (gpu_id, problem_id, variant_id)
);

-- Both timings of an elimination are live timings of its GPU and problem,
-- its own of its variant.
CREATE TRIGGER eliminations_timed_insert BEFORE INSERT ON eliminations
WHEN NOT EXISTS (SELECT 1 FROM timings t
                 WHERE t.id = NEW.timing_id AND t.variant_id = NEW.variant_id
                   AND t.gpu_id = NEW.gpu_id AND t.problem_id = NEW.problem_id AND t.retired = 0)
  OR NOT EXISTS (SELECT 1 FROM timings t
                 WHERE t.id = NEW.best_timing_id AND t.gpu_id = NEW.gpu_id
                   AND t.problem_id = NEW.problem_id AND t.retired = 0)
BEGIN
  SELECT RAISE(ABORT, 'elimination timings are not live timings of its GPU and problem');
END;

PRAGMA user_version = 10;
