#!/bin/sh
# The driver on a model family end to end: `rlpost info` reports the
# family's architecture description, `generate` decodes greedily twice to
# the same tokens, `train` runs one GRPO step with the chat template (qwen3
# also LoRA over a Q8_0 base, resumed bit for bit), and `serve` answers an
# OpenAI chat completion. FAMILY is
#   qwen3  — a tiny random Qwen3 (tests/cli/make_tiny_qwen3.py) with the
#            real Qwen3 tokenizer from the shared data (skips without it);
#   gemma3 — the real Gemma 3 270M GGUF (scripts/fetch-model.sh gemma3-270m;
#            skips without it).
# Usage: check_family_cli.sh RLPOST SOURCE_ROOT FAMILY
set -u
rlpost=$1
root=$2
family=$3
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
out=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$out"' EXIT
fail() { echo "FAIL ($family): $*"; exit 1; }
case "$family" in
qwen3)
  tok="${RLPOST_SHARED_DATA:-}/tokenizers/qwen3"
  [ -n "${RLPOST_SHARED_DATA:-}" ] && [ -f "$tok/tokenizer.json" ] || { echo "no Qwen3 tokenizer: skipped"; exit 77; }
  mkdir "$out/model"
  python3 "$root/tests/cli/make_tiny_qwen3.py" "$out/model" "$tok" || fail "make_tiny_qwen3.py"
  model="$out/model"
  want='{"architecture": "qwen3", "qk_norm": true, "post_norms": false, "activation": "silu", "head_dim": 16, "hidden_size": 32}'
  ;;
gemma3)
  model="${RLPOST_MODEL_DIR:-$root/models}/gemma-3-270m-q4_k_m.gguf"
  [ -f "$model" ] || { echo "no $model: skipped"; exit 77; }
  want='{"architecture": "gemma3", "qk_norm": true, "post_norms": true, "activation": "gelu_tanh", "head_dim": 256, "sliding_window": 512, "n_local_layers": 15}'
  ;;
*) fail "unknown family" ;;
esac

"$rlpost" info "$model" >"$out/info.json" || fail "info"
python3 - "$out/info.json" "$want" <<'PY' || fail "info fields"
import json, sys
info, want = json.load(open(sys.argv[1])), json.loads(sys.argv[2])
for k, v in want.items():
    assert info.get(k) == v, (k, info.get(k), v)
PY

G() { "$rlpost" generate "$model" --chat --prompt "What is 2 + 3?" --temperature 0 --max-new-tokens 6 --threads 2; }
G >"$out/g1.json" || fail "generate"
G >"$out/g2.json" || fail "generate (again)"
python3 - "$out" <<'PY' || fail "generate output"
import json, sys
a = json.load(open(sys.argv[1] + "/g1.json"))["completions"][0]
b = json.load(open(sys.argv[1] + "/g2.json"))["completions"][0]
assert a["tokens"] == b["tokens"], (a, b)
assert 1 <= len(a["tokens"]) <= 6, a
PY

# one GRPO step: 2 prompts x 2 samples, chat template, a regex reward
python3 - "$out" "$model" <<'PY' || fail "train config"
import json, sys
d, model = sys.argv[1:]
with open(d + "/data.jsonl", "w") as f:
    for q, a in [("What is 2 + 3?", "5"), ("What is 4 + 4?", "8"), ("What is 1 + 6?", "7")]:
        f.write(json.dumps({"question": q, "answer": a}) + "\n")
json.dump({"model": model, "threads": 2, "seed": 3, "output": d + "/run", "steps": 1, "group_size": 2,
           "prompts_per_step": 2, "task": {"name": "jsonl", "path": d + "/data.jsonl"},
           "reward": {"name": "regex_match", "options": {"pattern": "[0-9]"}},
           "sampling": {"temperature": 1.0, "max_new_tokens": 8}, "optimizer": {"lr": 1e-5},
           "eval": {"n": 0}}, open(d + "/config.json", "w"), indent=1)
PY
"$rlpost" train "$out/config.json" >"$out/train.json" 2>"$out/train.err" || { tail -20 "$out/train.err"; fail "train"; }
python3 - "$out" <<'PY' || fail "train metrics"
import json, sys
m = [json.loads(l) for l in open(sys.argv[1] + "/run/metrics.jsonl")]
assert [r["step"] for r in m] == [1] and m[0]["n_seqs"] == 4 and m[0]["invalid_seqs"] == 0, m
PY

# qwen3: LoRA over a Q8_0 base (every row of this model is a multiple of 32):
# 3 steps uninterrupted, and 1 step then --resume to 3, with one thread; the
# resumed steps 2-3 equal the uninterrupted ones bit for bit (the checkpoint
# keeps the dequantized base and re-quantizing it gives the same blocks)
if [ "$family" = qwen3 ]; then
  python3 - "$out" <<'PY' || fail "qlora config"
import json, sys
d = sys.argv[1]
c = json.load(open(d + "/config.json"))
# groups of 4 and a reward this random model sometimes earns ("s" in 8 tokens): steps with a gradient
c.update({"threads": 1, "steps": 3, "group_size": 4, "lora": {"rank": 4, "alpha": 8.0, "base_dtype": "q8_0"},
          "optimizer": {"lr": 5e-3}, "reward": {"name": "regex_match", "options": {"pattern": "s"}}})
json.dump(c, open(d + "/qlora.json", "w"))
PY
  "$rlpost" train "$out/qlora.json" --set "output=\"$out/qa\"" >/dev/null 2>"$out/qa.err" ||
    { tail -20 "$out/qa.err"; fail "qlora: 3 steps"; }
  grep -q "base q8_0" "$out/qa.err" || { cat "$out/qa.err"; fail "qlora: the base type on stderr"; }
  "$rlpost" train "$out/qlora.json" --set "output=\"$out/qb\"" --set steps=1 >/dev/null 2>"$out/qb.err" ||
    { tail -20 "$out/qb.err"; fail "qlora: 1 step"; }
  "$rlpost" train "$out/qlora.json" --set "output=\"$out/qb\"" --resume "$out/qb" >/dev/null 2>"$out/qb.err" ||
    { tail -20 "$out/qb.err"; fail "qlora: resume"; }
  python3 - "$out" <<'PY' || fail "qlora: resume is not bit-exact"
import json, sys
d = sys.argv[1]
load = lambda p: [json.loads(l) for l in open(d + p)]
a, b = load("/qa/metrics.jsonl"), load("/qb/metrics.jsonl")
assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2, 3], (a, b)
assert any(r["grad_norm"] > 0 for r in a), [r["grad_norm"] for r in a]
loose = {"rollout_seconds", "reward_seconds", "train_seconds", "publish_seconds", "step_seconds", "tokens_per_second",
         "elapsed_seconds", "trainer_idle_seconds", "rollout_idle_seconds"}
for x, y in zip(a, b):
    for k in x:
        if k not in loose:
            assert x[k] == y[k], ("step", x["step"], k, x[k], y[k])
PY
fi

"$rlpost" serve "$model" --port 0 --threads 2 >"$out/serve.out" 2>"$out/serve.log" &
pid=$!
j=0
while ! grep -q listening "$out/serve.out" 2>/dev/null && [ $j -lt 1200 ]; do sleep 0.05; j=$((j + 1)); done
python3 - "$out/serve.out" <<'PY' || { tail -20 "$out/serve.log"; fail "serve"; }
import json, sys, urllib.request
url = json.loads(open(sys.argv[1]).readline())["listening"]
body = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 5, "temperature": 0}
req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
r = json.load(urllib.request.urlopen(req, timeout=120))
assert r["choices"][0]["message"]["role"] == "assistant", r
assert 1 <= r["usage"]["completion_tokens"] <= 5, r
PY
echo ok
