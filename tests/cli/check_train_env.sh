#!/bin/sh
# `rlpost train` on a multi-turn task (configs/lookup.json: the lookup task,
# the built-in tools environment, lookup_em) with SmolLM2, one step in each
# of sync, pull and async mode, and one step against the reference HTTP
# environment (examples/env_server.py) through env.url: every record has the
# episode keys with sane values (episodes = samples, turns ≥ 1, a masked
# share in (0, 1) when tools answered), samples.jsonl carries episode
# records, an evaluation reports the tool-call rate with its interval.
# Misuse: env.name and env.url together, an unknown built-in, a bad
# multiturn.max_turns: exit 2 naming the key. Skips (77) without the model
# or python3. Usage: check_train_env.sh RLPOST SOURCE_ROOT
set -u
rlpost=$1
root=$2
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$model" ] || { echo "no $model: skipped"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
out=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
T() {
  "$rlpost" train "$root/configs/lookup.json" --set "model=\"$model\"" --set steps=1 --set group_size=2 \
    --set prompts_per_step=2 --set sampling.max_new_tokens=24 --set multiturn.max_tokens=160 \
    --set eval.n=2 --set eval.samples=1 "$@"
}

# --- misuse
T --set 'env.url="http://127.0.0.1:9"' --set "output=\"$out/bad\"" >/dev/null 2>"$out/err"
[ $? -eq 2 ] && grep -q "env" "$out/err" || { cat "$out/err"; fail "env.name with env.url"; }
T --set 'env.name="nosuch"' --set "output=\"$out/bad\"" >/dev/null 2>"$out/err"
[ $? -ne 0 ] && grep -q "nosuch" "$out/err" || { cat "$out/err"; fail "unknown built-in"; }
T --set multiturn.max_turns=0 --set "output=\"$out/bad\"" >/dev/null 2>"$out/err"
[ $? -eq 2 ] && grep -q "multiturn.max_turns" "$out/err" || { cat "$out/err"; fail "max_turns 0"; }

# --- one step per mode with the built-in tools environment
# (the evaluations only in sync mode: they run the same episodes in every mode)
for mode in sync pull async; do
  n=0
  [ $mode = sync ] && n=2
  T --set "sync.mode=\"$mode\"" --set "output=\"$out/$mode\"" --set eval.n=$n >"$out/$mode.json" 2>"$out/$mode.err" ||
    { cat "$out/$mode.err"; fail "$mode run"; }
done

# --- the reference HTTP environment (a calculator tool) through env.url
python3 "$root/examples/env_server.py" --port 0 >"$out/port" 2>"$out/server.err" &
server=$!
for i in $(seq 50); do [ -s "$out/port" ] && break; sleep 0.1; done
port=$(head -n 1 "$out/port" | tr -dc 0-9)
[ -n "$port" ] || { cat "$out/server.err"; fail "env_server.py did not start"; }
T --set 'env.name=null' --set "env.url=\"http://127.0.0.1:$port\"" --set "output=\"$out/http\"" \
  --set 'sampling.stop=["</calculator>", "</answer>"]' --set 'task.options={"min_hops": 1, "max_hops": 1, "chat": true}' \
  >"$out/http.json" 2>"$out/http.err" || { cat "$out/http.err"; fail "http environment run"; }

python3 - "$out" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
for run in ["sync", "pull", "async", "http"]:
    recs = [json.loads(l) for l in open(d + "/" + run + "/metrics.jsonl")]
    assert len(recs) == 1, (run, recs)
    r = recs[0]
    for k in ["episodes", "turns_mean", "turns_max", "tool_call_rate", "tool_calls", "tool_errors", "tool_timeouts",
              "tool_seconds", "masked_token_share", "episodes_truncated", "episodes_max_turns", "episodes_failed"]:
        assert k in r, (run, k, r)
    assert r["episodes"] == r["completions"] == 4, (run, r)
    assert 1 <= r["turns_mean"] <= r["turns_max"] <= 4, (run, r)
    assert r["episodes_failed"] == 0 and r["tool_timeouts"] == 0, (run, r)
    if run != "http":  # the tools environment answers the forced first search
        assert r["tool_calls"] >= 1 and 0 < r["masked_token_share"] < 1, (run, r)
    samples = [json.loads(l) for l in open(d + "/" + run + "/samples.jsonl")]
    assert any("episode" in s for s in samples), run
    if run in ("pull", "async"):
        continue
    ev = [json.loads(l) for l in open(d + "/" + run + "/eval.jsonl")]
    assert ev and all("greedy_tool_call_rate" in e and len(e["greedy_tool_call_rate_ci"]) == 2 for e in ev), (run, ev)
PY
echo ok
