# s36: runs s35's prepared call NAME (results/raw/s35/scripts/NAME.sh:
# next1, call1, call2, call3) on the s36 pack, build-gpu9: the tables' ws90
# backward variants were rehashed in 10eccb4, so s35's pack (build-gpu8),
# whose generator predates it, would leave them out as stale. s35's
# after-scripts take the pack from $PACK already.
#   bash results/raw/s36/scripts/s35_on_s36_pack.sh next1    (carry build-gpu9)
set -u
name=${1:?usage: s35_on_s36_pack.sh next1|call1|call2|call3}
src=results/raw/s35/scripts/$name.sh
[ -f "$src" ] || { echo "s35_on_s36_pack.sh: no $src"; exit 2; }
sed 's#build-gpu8/build-gpu#build-gpu9/build-gpu#g' "$src" > "/tmp/s35_$name.sh"
bash "/tmp/s35_$name.sh"
