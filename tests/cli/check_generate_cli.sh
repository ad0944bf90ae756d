#!/bin/sh
# `rlpost generate` replays a training prompt exactly: with --chat --system S
# --assistant-prefix A the prompt is the chat template's rendering of the
# system and user messages (with the generation prompt) followed by A
# encoded as plain text (no special tokens), which is how a task renders
# "system_prompt" and "assistant_prefix"; the completion continues from A.
# --assistant-prefix without --chat is refused (exit 2). --no-thinking
# (Qwen3's enable_thinking=False) leaves SmolLM2's template unchanged and
# also needs --chat. Skips without the
# default model (SmolLM2-135M-Instruct, scripts/fetch-model.sh).
# Usage: check_generate_cli.sh RLPOST SOURCE_ROOT
set -u
rlpost=$1
model="${RLPOST_MODEL_DIR:-$2/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$model" ] || { echo "no $model: skipped"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
sys="Answer with a number."
G() { "$rlpost" generate "$model" --chat --system "$sys" --prompt "What is 2 + 3?" --temperature 0 --max-new-tokens 4 \
  --threads 1 "$@"; }
G >"$out/plain.json" || fail "generate --chat --system"
G --assistant-prefix "<think>" >"$out/prefix.json" || fail "generate --assistant-prefix"
G --no-thinking >"$out/nothink.json" || fail "generate --no-thinking"
"$rlpost" tokenize "$model" "<think>" >"$out/think.json" || fail "tokenize"
python3 - "$out" <<'PY' || fail "prompt tokens"
import json, sys
d = sys.argv[1]
plain = json.load(open(d + "/plain.json"))["prompts"][0]["tokens"]
pre = json.load(open(d + "/prefix.json"))["prompts"][0]["tokens"]
think = json.load(open(d + "/think.json"))
assert len(think) > 1, think  # "<think>" is plain text here, not one special token
assert pre == plain + think, (plain, pre, think)
nothink = json.load(open(d + "/nothink.json"))["prompts"][0]["tokens"]
assert nothink == plain, (plain, nothink)  # only Qwen3's template has the switch
PY
"$rlpost" generate "$model" --assistant-prefix "<think>" --prompt "x" >/dev/null 2>"$out/err"
[ $? -eq 2 ] || fail "--assistant-prefix without --chat must exit 2"
grep -q "needs --chat" "$out/err" || { cat "$out/err"; fail "message"; }
"$rlpost" generate "$model" --no-thinking --prompt "x" >/dev/null 2>"$out/err"
[ $? -eq 2 ] || fail "--no-thinking without --chat must exit 2"
grep -q -e "--no-thinking needs --chat" "$out/err" || { cat "$out/err"; fail "message"; }
echo ok
