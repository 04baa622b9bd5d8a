# SPDX-License-Identifier: MIT
# Proves the page `fatune report` writes renders in a real browser: headless
# Chromium parses it and the rendered DOM holds the charts, each with at
# least two series, a series path with a non-empty d for every line series
# of the fixture, the roofline's point groups, the roofs, the summary and
# every winner's name; a screenshot is left at $FATUNE_REPORT_SHOT (default
# /tmp/fatune-report.png) for a person to look at.
#
# The fixture database comes from tests/test_report.c (FATUNE_KEEP_DB), the
# page from the fatune binary given as $1. Skips (77) when Chromium is not
# installed or when this fatune does not dispatch `report` yet.
set -u
fatune=${1:?usage: test_report_render.sh PATH/TO/fatune}
helper=$(dirname "$fatune")/tests/test_report
shot=${FATUNE_REPORT_SHOT:-/tmp/fatune-report.png}
# The fixture's series paths: bf16 causal 2 (d64, d128), fp16 no mask 7 (d64: the winner,
# two SDPA backends, a custom source; d128: the winner and two backends), bf16 decoding 2;
# the roofline's point groups 3 (mma.sync fp16, bf16; wgmma bf16). Roofs: the decoding
# chart's copy bandwidth, the roofline's mma.sync peak and bandwidth line.
want_series=11
want_groups=3
want_charts=4
want_roofs=3

browser=
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then browser=$b; break; fi
done
if [ -z "$browser" ]; then
  echo "skipped: no chromium on PATH"
  exit 77
fi
if ! "$fatune" report --help 2>/dev/null | grep -q '^Usage: fatune report'; then
  echo "skipped: $fatune does not dispatch 'report' yet"
  exit 77
fi
if [ ! -x "$helper" ]; then
  echo "FAIL: fixture helper $helper not built" >&2
  exit 1
fi

work=$(mktemp -d /tmp/fatune_test_report_render.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

FATUNE_KEEP_DB="$work/fixture.db" "$helper" >"$work/helper.log" 2>&1 ||
  { cat "$work/helper.log" >&2; fail "fixture helper failed"; }
"$fatune" report --db "$work/fixture.db" -o "$work/report.html" >"$work/report.log" 2>&1 ||
  { cat "$work/report.log" >&2; fail "fatune report exited $?"; }
grep -q "^wrote $work/report.html: NVIDIA Fixture GPU, $want_charts charts, 11 winners\$" \
  "$work/report.log" || { cat "$work/report.log" >&2; fail "unexpected report message"; }

# Chromium wants a writable profile and home; keep both inside $work.
export HOME="$work"
flags="--headless --no-sandbox --disable-gpu --user-data-dir=$work/profile"
timeout 120 "$browser" $flags --dump-dom "file://$work/report.html" \
  >"$work/dom.html" 2>"$work/chromium.log" ||
  { tail -20 "$work/chromium.log" >&2; fail "chromium --dump-dom failed"; }

dom="$work/dom.html"
n_svg=$(grep -o '<svg' "$dom" | wc -l)
[ "$n_svg" -eq "$want_charts" ] || fail "rendered DOM has $n_svg <svg>, expected $want_charts"
n_series=$(grep -oE '<path class="series"[^>]* d="M[0-9.]+,[0-9.]+' "$dom" | wc -l)
[ "$n_series" -eq "$want_series" ] ||
  fail "rendered DOM has $n_series non-empty series paths, expected $want_series"
n_groups=$(grep -oE '<g class="series"' "$dom" | wc -l)
[ "$n_groups" -eq "$want_groups" ] ||
  fail "rendered DOM has $n_groups roofline series, expected $want_groups"
# Every chart compares: at least two series in each <svg>.
few=$(awk 'BEGIN { RS = "</svg>" } /<svg/ { n = gsub(/class="series"/, "&"); if (n < 2) bad++ }
           END { print bad + 0 }' "$dom")
[ "$few" -eq 0 ] || fail "rendered DOM has $few charts with fewer than two series"
grep -q '<h2 id="summary">' "$dom" || fail "rendered DOM has no summary"
n_empty=$(grep -oE '<path[^>]* d=""' "$dom" | wc -l)
[ "$n_empty" -eq 0 ] || fail "rendered DOM has $n_empty paths with an empty d"
n_roofs=$(grep -oE '<path class="roof"[^>]* d="M[0-9.]+,[0-9.]+' "$dom" | wc -l)
[ "$n_roofs" -eq "$want_roofs" ] || fail "rendered DOM has $n_roofs roofs, expected $want_roofs"
# The parser kept the table: 11 winners, text intact once <wbr> is dropped.
text=$(sed 's/<wbr>//g' "$dom")
for name in fwd.mma80.fp16.d64.none.m128n64w4s2.s1024 fwd.mma80.fp16.d128.none.m128n64w4s2.s4096 \
            fwd.mma80.bf16.d128.causal.m128n64w4s2.s2048; do
  printf '%s' "$text" | grep -q "<td class=\"name\">$name</td>" || fail "winner $name not in the table"
done
if grep -qi 'http' "$dom"; then fail "rendered DOM mentions http"; fi

rm -f "$shot"
timeout 120 "$browser" $flags --hide-scrollbars --window-size=1100,2900 \
  --screenshot="$shot" "file://$work/report.html" >>"$work/chromium.log" 2>&1 ||
  { tail -20 "$work/chromium.log" >&2; fail "chromium --screenshot failed"; }
[ -s "$shot" ] || fail "no screenshot at $shot"
echo "test_report_render: passed; screenshot at $shot"
