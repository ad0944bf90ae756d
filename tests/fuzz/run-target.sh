#!/bin/sh
# One bounded libFuzzer run of one target, as a test of the 'fuzz' suite
# (meson -Dfuzz=true, see docs/fuzzing.md). It starts from the committed
# corpus (read only: new inputs go to a scratch folder in the build dir)
# plus the target's dictionary, and fails on any crash, leak, timeout or
# out-of-memory input, printing the reproducer: its path, the command that
# replays it, and the input as base64 when it is small.
#
# Usage: run-target.sh FUZZ_BINARY COMMITTED_CORPUS_DIR [DICT]
# Environment: RLPOST_FUZZ_SECONDS (default 30) total time of the run,
# RLPOST_FUZZ_TIMEOUT (default 10) seconds one input may take,
# RLPOST_FUZZ_RSS_MB (default 2048) memory limit.
set -u
bin=$1
corpus=$2
dict=${3:-}
secs=${RLPOST_FUZZ_SECONDS:-30}
per_input=${RLPOST_FUZZ_TIMEOUT:-10}
rss=${RLPOST_FUZZ_RSS_MB:-2048}
name=$(basename "$bin")
work=$(cd "$(dirname "$bin")" && pwd)/fuzz-work/$name
rm -rf "$work/artifacts"
mkdir -p "$work/new" "$work/artifacts"
[ -n "$dict" ] && [ -f "$dict" ] && dictarg="-dict=$dict" || dictarg=

# a stack for UBSan reports too (libFuzzer sets ASan's own options)
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export UBSAN_OPTIONS

echo "$name: ${secs}s from $corpus ($(ls "$corpus" | wc -l) files)${dictarg:+, $dictarg}"
# The outer timeout only guards against a hang of libFuzzer itself: inputs
# are bounded by -timeout, the run by -max_total_time.
# shellcheck disable=SC2086
timeout -k 10 $((secs + per_input + 120)) "$bin" -max_total_time="$secs" -timeout="$per_input" \
    -rss_limit_mb="$rss" -print_final_stats=1 -artifact_prefix="$work/artifacts/" $dictarg \
    "$work/new" "$corpus" > "$work/log" 2>&1
rc=$?

# the run's totals: libFuzzer's last status line and its final stats
grep -E '^#[0-9]+[[:space:]]+(DONE|INITED)' "$work/log" | tail -n 1
grep -E '^stat::(number_of_executed_units|peak_rss_mb|new_units_added)' "$work/log"

# reproducers (crash-, leak-, timeout-, oom-); slow-unit- files are not failures
found=
for a in "$work"/artifacts/*; do
    [ -f "$a" ] || continue
    case ${a##*/} in slow-unit-*) ;; *) found="$found $a" ;; esac
done
if [ $rc -eq 0 ] && [ -z "$found" ]; then
    echo "$name: no crash ($(ls "$work/new" | wc -l) new inputs in $work/new)"
    exit 0
fi

echo "$name: FAILED (exit $rc); the end of the fuzzer's log ($work/log):"
tail -n 60 "$work/log"
[ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "$name: the run did not end by itself within $((secs + per_input + 120))s"
for path in $found; do
    size=$(wc -c < "$path")
    echo "---- reproducer: $path ($size bytes)"
    echo "replay:    $bin $path"
    echo "           (without libFuzzer, in any build: ninja -C BUILD tests/fuzz_seeds_${name#fuzz_} &&"
    echo "            BUILD/tests/fuzz_seeds_${name#fuzz_} $path)"
    echo "regression seed: cp $path $corpus/"
    if [ "$size" -le 4096 ]; then
        echo "base64 (decode with base64 -d > input):"
        base64 "$path"
    fi
done
exit 1
