#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Makes a device call's output folder fit what the device tool brings back:
# at most 8 files of at most 16 MiB each, 64 MiB in all, no deeper than two
# folders. Past the eighth file the rest are dropped without a word, and a
# session once lost half of a tuning database that way (to two empty
# sqlite side files of another database).
#   scripts/fit_out.sh [DIR]          (default: $OUT, else ./gpu-out)
# Run it last, after every process writing there has ended. It
#   - deletes the sqlite side files of closed databases (an empty -wal, a
#     -shm): a -wal with content means a database still open, and stops it;
#   - gzips each *.db and splits it into 15 MiB parts (.db.gz.partNN;
#     cat them | gunzip to rebuild);
#   - when more than 8 files remain, puts all but the database parts,
#     gpu_run.log and earlier archives into one rest.tgz (rest2.tgz on a
#     second run; split too when it passes 15 MiB);
#   - prints what will come back and warns past the limits.
set -u -o pipefail
DIR=${1:-${OUT:-gpu-out}}
MAX_FILES=8
PART=15m
cd "$DIR" || { echo "fit_out.sh: no folder $DIR" >&2; exit 1; }

for wal in $(find . -maxdepth 2 -name '*-wal' -type f); do
  if [ -s "$wal" ]; then
    echo "fit_out.sh: $wal is not empty: its database is still open (close it first)" >&2
    exit 1
  fi
  rm -f "$wal"
done
find . -maxdepth 2 -name '*-shm' -type f -delete

for db in $(find . -maxdepth 2 -name '*.db' -type f); do
  gzip -f "$db" && split -b "$PART" -d "$db.gz" "$db.gz.part" && rm -f "$db.gz" ||
    { echo "fit_out.sh: could not pack $db" >&2; exit 1; }
done

# A second run keeps the first one's archive and makes another.
kept() { case "$1" in *.db.gz.part[0-9][0-9] | ./gpu_run.log | ./rest*.tgz*) return 0 ;; *) return 1 ;; esac; }
archive=rest.tgz
for n in 2 3 4 5 6 7 8; do [ -e "$archive" ] || [ -e "$archive.part00" ] || break; archive=rest$n.tgz; done
mapfile -t files < <(find . -type f | sort)
if [ "${#files[@]}" -gt "$MAX_FILES" ]; then
  rest=()
  for f in "${files[@]}"; do kept "$f" || rest+=("$f"); done
  tar czf "$archive" "${rest[@]}" && rm -f "${rest[@]}" || { echo "fit_out.sh: tar failed" >&2; exit 1; }
  find . -mindepth 1 -type d -empty -delete
  if [ "$(stat -c %s "$archive")" -gt $((15 * 1024 * 1024)) ]; then
    split -b "$PART" -d "$archive" "$archive.part" && rm -f "$archive"
  fi
  echo "fit_out.sh: ${#rest[@]} files went into $archive (cat $archive* | tar xz)"
fi

mapfile -t files < <(find . -type f | sort)
total=0 problems=0
for f in "${files[@]}"; do
  size=$(stat -c %s "$f")
  total=$((total + size))
  depth=$(($(tr -cd / <<<"$f" | wc -c) - 1))
  if [ "$size" -gt $((16 * 1024 * 1024)) ]; then echo "fit_out.sh: $f is over 16 MiB" >&2; problems=1; fi
  if [ "$depth" -gt 2 ]; then echo "fit_out.sh: $f is more than two folders down" >&2; problems=1; fi
done
if [ "${#files[@]}" -gt "$MAX_FILES" ]; then
  echo "fit_out.sh: ${#files[@]} files: only $MAX_FILES come back" >&2
  problems=1
fi
if [ "$total" -gt $((64 * 1024 * 1024)) ]; then
  echo "fit_out.sh: $((total / 1024 / 1024)) MiB in all: only 64 MiB come back" >&2
  problems=1
fi
echo "fit_out.sh: ${#files[@]} files, $((total / 1024)) KiB: ${files[*]}"
exit "$problems"
