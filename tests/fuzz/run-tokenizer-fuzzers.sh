#!/bin/sh
# Builds the tokenizer fuzz targets with clang (libFuzzer + ASan + UBSan)
# in their own folder and runs each for a bounded time on a scratch copy of
# its seed corpus. Usage: tests/fuzz/run-tokenizer-fuzzers.sh [SECONDS] [BUILD_DIR]
# (default 60 s per target, build-fuzz-tokenizer). Crashes are written to
# BUILD_DIR/artifacts/; the script exits non-zero if a target failed.
set -eu
secs=${1:-60}
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${2:-$src/build-fuzz-tokenizer}
mkdir -p "$out/gen" "$out/artifacts"
CC=${CC:-clang}
sed -e 's/@RLP_VERSION_MAJOR@/0/' -e 's/@RLP_VERSION_MINOR@/0/' -e 's/@RLP_VERSION_PATCH@/0/' \
    -e 's/@RLP_VERSION_STRING@/0.0.0-fuzz/' -e 's/@RLP_ABI_VERSION@/0/' \
    "$src/include/rlpost_version.h.in" > "$out/gen/rlpost_version.h"
libsrc="core/error.c model/tok_map.c model/tok_utf8.c model/tokenizer.c model/tokenizer_json.c
        model/tokenizer_bin.c model/chat_template.c"
set -- $(for f in $libsrc; do echo "$src/lib/$f"; done)
flags="-g -O1 -std=c11 -D_GNU_SOURCE -DRLPOST_BUILDING -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -I$src/include -I$src/lib -I$out/gen"
libs="$(pkg-config --cflags --libs jansson libpcre2-8 icu-uc) -lpthread -lm"
status=0
for t in tokenizer_json tokenizer_bin; do
    # shellcheck disable=SC2086
    $CC $flags "$src/tests/fuzz/fuzz_$t.c" "$@" $libs -o "$out/fuzz_$t"
    rm -rf "$out/corpus_$t"
    cp -r "$src/tests/fuzz/corpus/$t" "$out/corpus_$t"
    echo "== fuzz_$t for ${secs}s"
    dict=
    [ -f "$src/tests/fuzz/$t.dict" ] && dict="-dict=$src/tests/fuzz/$t.dict"
    # shellcheck disable=SC2086
    if ! "$out/fuzz_$t" $dict -max_total_time="$secs" -max_len=65536 -rss_limit_mb=4096 -timeout=20 \
        -artifact_prefix="$out/artifacts/$t-" "$out/corpus_$t" > "$out/fuzz_$t.log" 2>&1; then
        echo "fuzz_$t FAILED: see $out/fuzz_$t.log and $out/artifacts/"
        status=1
    fi
    tail -n 3 "$out/fuzz_$t.log"
done
exit $status
