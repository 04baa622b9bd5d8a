# s36: s35's next1.sh (the binding's GPU tests over the CPU-only commits,
# hostparts2, bench_torch host) on the s36 pack.
set -u
sed 's#^PACK=build-gpu8/build-gpu#PACK=build-gpu9/build-gpu#' results/raw/s35/scripts/next1.sh > /tmp/next1.sh
bash /tmp/next1.sh
