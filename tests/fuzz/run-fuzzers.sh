#!/bin/sh
# Runs the libFuzzer targets locally the way CI does: a clang build with
# -Dfuzz=true (ASan + UBSan + coverage) and the 'fuzz' suite of meson test,
# each target for SECONDS from its committed corpus, two at a time.
# Usage: tests/fuzz/run-fuzzers.sh [SECONDS=60] [TARGET...]  (e.g. fuzz_gguf)
# Environment: BUILD (default build-fuzz), JOBS (default 2), and the
# runner's RLPOST_FUZZ_TIMEOUT / RLPOST_FUZZ_RSS_MB. See docs/fuzzing.md.
set -eu
secs=${1:-60}
[ $# -gt 0 ] && shift
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-"$root/build-fuzz"}
if [ ! -f "$build/build.ninja" ]; then
    CC=${CC:-clang} meson setup "$build" "$root" -Dfuzz=true -Dcuda=disabled -Dexamples=false -Dpython=false
fi
RLPOST_FUZZ_SECONDS=$secs exec meson test -C "$build" --suite fuzz --print-errorlogs \
    --num-processes "${JOBS:-2}" "$@"
