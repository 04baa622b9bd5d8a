-- Schema version 3 -> 4: timing_jobs, which timings were taken together in
-- one interleaved job (db/schema.sql says why). A new table only: the rows
-- of version 3 stay as they are, every one of their timings counted as
-- taken alone. core/db.c runs this file as it runs 2.sql and 3.sql.

CREATE TABLE timing_jobs (
  timing_id INTEGER PRIMARY KEY REFERENCES timings (id),
  job       INTEGER NOT NULL REFERENCES timings (id)  -- the id of the job's first timing
);
CREATE INDEX timing_jobs_by_job ON timing_jobs (job);

PRAGMA user_version = 4;
