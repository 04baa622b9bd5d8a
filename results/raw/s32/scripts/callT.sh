# issue 22: the cold default tune of head dim 128 and its rerun, wall times.
set -u
cat > /tmp/afterT.sh <<'AEOF'
ls -la "$DB"; rm -f "$DB" "$DB"-wal "$DB"-shm
AEOF
PACK=build-gpu8/build-gpu TUNE_S=400 TUNE1="--head-dim 128 --json $OUT/cold.json" TUNE2="--head-dim 128 --json $OUT/rerun.json" AFTER=/tmp/afterT.sh bash scripts/gpu_call.sh
