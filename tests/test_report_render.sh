# SPDX-License-Identifier: MIT
# Proves the page `fatune report` writes renders in a real browser: headless
# Chromium parses it and the rendered DOM holds the charts, a series path
# with a non-empty d for every series of the fixture, the roofs and every
# winner's name; a screenshot is left at $FATUNE_REPORT_SHOT (default
# /tmp/fatune-report.png) for a person to look at.
#
# The fixture database comes from tests/test_report.c (FATUNE_KEEP_DB), the
# page from the fatune binary given as $1. Skips (77) when Chromium is not
# installed or when this fatune does not dispatch `report` yet.
set -u
fatune=${1:?usage: test_report_render.sh PATH/TO/fatune}
helper=$(dirname "$fatune")/tests/test_report
shot=${FATUNE_REPORT_SHOT:-/tmp/fatune-report.png}
# The fixture's series paths: bf16 causal d128 has 1, its decoding shapes 1, fp16 d64 6,
# fp16 d128 5.
want_series=13
want_charts=5
want_roofs=2

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
grep -q "^wrote $work/report.html: NVIDIA Fixture GPU, $want_charts charts, 8 winners\$" \
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
n_empty=$(grep -oE '<path[^>]* d=""' "$dom" | wc -l)
[ "$n_empty" -eq 0 ] || fail "rendered DOM has $n_empty paths with an empty d"
n_roofs=$(grep -oE '<path class="roof"[^>]* d="M[0-9.]+,[0-9.]+' "$dom" | wc -l)
[ "$n_roofs" -eq "$want_roofs" ] || fail "rendered DOM has $n_roofs roofs, expected $want_roofs"
# The parser kept the table: 8 winners, text intact once <wbr> is dropped.
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
