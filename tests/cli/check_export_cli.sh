#!/bin/sh
# `rlpost export` and `rlpost train`'s checkpoint.gguf: the tiny fixture
# exported as F32 gives the same logprobs, to the printed digit, as the
# source; bad types exit 2 naming the value and an unwritable output exits
# 1 naming the path, leaving no file; a bad checkpoint.gguf value exits 2
# naming the key. With the default model (SmolLM2, skipped otherwise): a
# 1-step run with checkpoint.gguf "q8_0" writes <output>/model.gguf, named
# in the summary, that `rlpost logprobs` loads.
# Usage: check_export_cli.sh RLPOST SOURCE_ROOT
set -u
rlpost=$1
root=$2
tiny="$root/tests/reference/fixtures/tiny_tied.gguf"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
echo "{}" >"$out/cfg.json"

"$rlpost" export "$tiny" "$out/tiny.gguf" --type f32 --name tiny >/dev/null || fail "export --type f32"
lp() { "$rlpost" logprobs "$1" --tokens 0,1,2,3,4,5 --threads 1 | sed 's/"model": "[^"]*", //'; }
[ "$(lp "$tiny")" = "$(lp "$out/tiny.gguf")" ] || fail "F32 export: logprobs differ"
"$rlpost" export "$tiny" "$out/tiny16.gguf" --type F16 --embed-type q8_0 >/dev/null || fail "export --type F16"

"$rlpost" export "$tiny" "$out/bad.gguf" --type q5_k 2>"$out/err"
[ $? -eq 2 ] && grep -q "q5_k" "$out/err" || fail "unknown --type: $(cat "$out/err")"
"$rlpost" export "$tiny" "$out/no-such-dir/x.gguf" 2>"$out/err"
[ $? -eq 1 ] && grep -q "no-such-dir" "$out/err" || fail "unwritable output: $(cat "$out/err")"
"$rlpost" export "$tiny" 2>/dev/null
[ $? -eq 2 ] || fail "missing OUT accepted"
[ ! -e "$out/bad.gguf" ] || fail "a failed export left a file"
ls "$out" | grep -q tmp && fail "a temporary was left: $(ls "$out")"

"$rlpost" train "$out/cfg.json" --set 'checkpoint.gguf="q5_k"' --set "output=\"$out/run0\"" 2>"$out/err"
[ $? -eq 2 ] && grep -q "checkpoint.gguf" "$out/err" || fail "bad checkpoint.gguf: $(cat "$out/err")"
[ ! -e "$out/run0" ] || fail "a refused configuration created its output"

model="${RLPOST_MODEL_DIR:-$root/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$model" ] || { echo "no $model: the train part skipped"; exit 0; }
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: the train part skipped"; exit 0; }
"$rlpost" train "$out/cfg.json" --set "model=\"$model\"" --set "output=\"$out/run\"" --set steps=1 --set group_size=2 \
  --set prompts_per_step=1 --set sampling.max_new_tokens=4 --set eval.n=0 --set threads=2 \
  --set 'checkpoint.gguf="q8_0"' >"$out/sum.json" 2>"$out/err" || { cat "$out/err"; fail "1-step run"; }
python3 - "$out" <<'PY' || fail "summary"
import json, sys
s = json.load(open(sys.argv[1] + "/sum.json"))
assert s["gguf"].endswith("/run/model.gguf"), s
PY
"$rlpost" logprobs "$out/run/model.gguf" --text "Hello there" --threads 2 >/dev/null || fail "model.gguf does not load"
echo ok
