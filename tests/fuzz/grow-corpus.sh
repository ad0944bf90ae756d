#!/bin/sh
# Grows one target's committed corpus: fuzzes for SECONDS (one process,
# -workers=1 -jobs=1) into a scratch folder, then merges (-merge=1) into
# tests/fuzz/corpus/TARGET only the inputs that add edge coverage
# (-use_counters=0: hit counts alone do not earn a file). The merge is
# additive, so hand-made seeds and crash reproducers already committed stay.
# Inputs are capped at MAX_LEN bytes (default 4096) to keep the corpus small.
# Usage: tests/fuzz/grow-corpus.sh TARGET SECONDS   (TARGET: gguf, jsonl, ...)
# Needs the -Dfuzz=true build (BUILD, default build-fuzz; see run-fuzzers.sh).
set -eu
t=$1
secs=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${BUILD:-$root/build-fuzz}" && pwd) # absolute: the run below changes folder
ninja -C "$build" "tests/fuzz_$t" > /dev/null
bin=$build/tests/fuzz_$t
corpus=$root/tests/fuzz/corpus/$t
scratch=$build/tests/fuzz-work/grow-$t
dict=$root/tests/fuzz/$t.dict
case $t in safetensors|config_json) dict=$root/tests/fuzz/model_json.dict ;; esac
mkdir -p "$scratch" "$corpus"
set --
[ -f "$dict" ] && set -- "-dict=$dict"
before=$(ls "$corpus" | wc -l)
# with -jobs, libFuzzer's job writes fuzz-0.log into the current folder
cd "$build/tests/fuzz-work"
"$bin" "$@" -max_total_time="$secs" -max_len="${MAX_LEN:-4096}" -timeout=10 -rss_limit_mb=2048 \
    -workers=1 -jobs=1 -print_final_stats=1 -artifact_prefix="$scratch/" "$scratch" "$corpus" \
    > "$scratch.log" 2>&1 || { tail -n 40 "$scratch.log"; exit 1; }
"$bin" -merge=1 -use_counters=0 -max_len="${MAX_LEN:-4096}" -timeout=10 -rss_limit_mb=2048 "$corpus" "$scratch" \
    > "$scratch.merge.log" 2>&1 || { tail -n 20 "$scratch.merge.log"; exit 1; }
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch.log")
echo "fuzz_$t: ${secs}s, $execs executions; corpus $before -> $(ls "$corpus" | wc -l) files," \
     "$(du -sk "$corpus" | cut -f1) KiB"
