#!/bin/sh
# Builds the model-file fuzz targets (safetensors, config.json, llama2.c)
# with clang's libFuzzer + ASan + UBSan in their own folder and runs each for
# a bounded time. Usage: tests/fuzz/run-model-fuzzers.sh [seconds-each=60]
# [build-dir=build-fuzz]. Needs clang and jansson headers; exits non-zero if
# any target finds a crash (the reproducer is left in the build dir).
set -eu
secs=${1:-60}
out=${2:-build-fuzz}
src=$(cd "$(dirname "$0")/../.." && pwd)
CC=${CC:-clang}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# the generated version header the public header includes
ver=$(sed -n "s/^  version: '\([0-9.]*\)',/\1/p" "$src/meson.build")
maj=${ver%%.*}; rest=${ver#*.}; min=${rest%%.*}; pat=${rest#*.}
sed -e "s/@RLP_VERSION_MAJOR@/$maj/; s/@RLP_VERSION_MINOR@/$min/; s/@RLP_VERSION_PATCH@/$pat/" \
    -e "s/@RLP_VERSION_STRING@/$ver/; s/@RLP_ABI_VERSION@/0/" \
    "$src/include/rlpost_version.h.in" > "$out/rlpost_version.h"

flags="-g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"
incs="-I$src/include -I$src/lib -I$out"
libsrc="$src/lib/core/error.c $src/lib/core/json_guard.c $src/lib/core/mapfile.c
        $src/lib/core/atomic_file.c $src/lib/model/config.c $src/lib/model/weights.c
        $src/lib/model/safetensors.c $src/lib/model/hf_config.c $src/lib/model/llama2c.c"

status=0
for t in safetensors config_json llama2c; do
    # shellcheck disable=SC2086
    $CC $flags $incs "$src/tests/fuzz/fuzz_$t.c" $libsrc -ljansson -lm -o "$out/fuzz_$t"
    mkdir -p "$out/corpus_$t"
    dict=""
    [ "$t" = llama2c ] || dict="-dict=$src/tests/fuzz/model_json.dict"
    echo "== fuzz_$t for ${secs}s"
    # shellcheck disable=SC2086
    (cd "$out" && ./"fuzz_$t" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 \
        -print_final_stats=1 $dict "corpus_$t" "$src/tests/fuzz/corpus/$t") || status=1
done
exit $status
