#!/bin/sh
# `rlpost train` with external rollout workers (docs/swarm.md) on
# stories260K: two `rlpost serve` workers on loopback (--port 0,
# --weights-dir the run's weights folder) and a trainer with rollout.urls
# naming them.
# - async, η = 1, 3 steps: 3 records of 16 valid samples with staleness ≤ 1
#   and nothing dropped; the weights folder's manifest says version 3; each
#   worker's /health reports a version the trainer published (≥ 2: the
#   rollout side pulls before each generate) and it served requests;
# - pull, 2 steps: staleness 0 (each generate follows the pull of the
#   latest version);
# - LoRA (lora.rank 4, pull, 2 steps, a worker of its own): each version
#   folder holds the PEFT adapter files only, the worker applies them to
#   its base and decodes the trainer's policy (mismatch KL < 1e-6);
# - a worker killed before the run: the trainer refuses rollout.urls with
#   one line, exit 2, nothing written.
# Skips (77) without the shared data or python3.
set -u
rlpost=$1
data=${RLPOST_SHARED_DATA:-}/llama2c/stories260K.bin
[ -n "${RLPOST_SHARED_DATA:-}" ] && [ -f "$data" ] || { echo "no stories260K.bin: skipped"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
out=$(mktemp -d)
pids=""
trap 'for p in $pids; do kill -9 $p 2>/dev/null; done; rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; for f in "$out"/worker*.log; do echo "--- $f"; tail -5 "$f"; done; exit 1; }

python3 "$(dirname "$0")/train_fixture.py" "$out" || exit 1
model="$out/model.bin"
cp "$data" "$model"
cfg="$out/config.json"
mkdir -p "$out/weights"
# the workers multiply at the trainer's precision (the LoRA check below
# wants their behaviour logprobs to equal the trainer's)
mm=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["matmul_precision"])' "$cfg") || exit 1

# two workers; each prints {"listening": URL, ...} once it accepts connections
urls=""
for i in 0 1; do
  "$rlpost" serve "$model" --port 0 --threads 1 --matmul-precision "$mm" --weights-dir "$out/weights" >"$out/worker$i.out" \
    2>"$out/worker$i.log" &
  pids="$pids $!"
done
for i in 0 1; do
  j=0
  while ! grep -q listening "$out/worker$i.out" 2>/dev/null && [ $j -lt 600 ]; do sleep 0.05; j=$((j + 1)); done
  u=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["listening"])' \
    "$out/worker$i.out") || fail "worker $i did not start"
  urls="$urls${urls:+, }\"$u\""
done
T() { "$rlpost" train "$cfg" --set "model=\"$model\"" --set "rollout.urls=[$urls]" \
  --set "sync.weights_dir=\"$out/weights\"" "$@"; }

T --set "output=\"$out/async\"" --set 'sync.mode="async"' --set sync.staleness=1 --set steps=3 \
  >"$out/async.json" 2>"$out/err" || { cat "$out/err"; fail "async with 2 workers"; }
T --set "output=\"$out/pull\"" --set 'sync.mode="pull"' --set steps=2 >/dev/null 2>"$out/err" ||
  { cat "$out/err"; fail "pull with 2 workers"; }
python3 - "$out" "[$urls]" <<'PY' || exit 1
import json, sys, urllib.request
d, urls = sys.argv[1], json.loads(sys.argv[2])
load = lambda p: [json.loads(l) for l in open(d + p)]
a = load("/async/metrics.jsonl")
assert [r["step"] for r in a] == [1, 2, 3] and [r["policy_version"] for r in a] == [1, 2, 3], a
for r in a:
    assert r["n_seqs"] == 16 and r["invalid_seqs"] == 0 and r["reward_valid"] == 16, r
    assert 0 <= r["staleness_max"] <= 1 and r["buffer_dropped"] == 0, r
p = load("/pull/metrics.jsonl")
assert [r["step"] for r in p] == [1, 2], p
for r in p:
    assert r["n_seqs"] == 16 and r["staleness_max"] == 0, r
# the pull run published versions 0-2 after the async run's 0-3; the manifest names the last
assert json.load(open(d + "/weights/latest.json"))["version"] == 2
for u in urls:
    h = json.load(urllib.request.urlopen(u + "/health", timeout=10))
    assert 1 <= h["version"] <= 3 and h["requests_done"] > 0, (u, h)
PY
[ $? -eq 0 ] || fail "swarm runs"

# LoRA: the trainer publishes adapters only and a worker started from the
# same base applies them (pull, 2 steps, a worker of its own)
mkdir -p "$out/wlora"
"$rlpost" serve "$model" --port 0 --threads 1 --matmul-precision "$mm" --weights-dir "$out/wlora" >"$out/worker2.out" 2>"$out/worker2.log" &
pids="$pids $!"
j=0
while ! grep -q listening "$out/worker2.out" 2>/dev/null && [ $j -lt 600 ]; do sleep 0.05; j=$((j + 1)); done
u2=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["listening"])' "$out/worker2.out") ||
  fail "worker 2 did not start"
"$rlpost" train "$cfg" --set "model=\"$model\"" --set "rollout.urls=[\"$u2\"]" --set "sync.weights_dir=\"$out/wlora\"" \
  --set "output=\"$out/lora\"" --set 'sync.mode="pull"' --set steps=2 --set lora.rank=4 >/dev/null 2>"$out/err" ||
  { cat "$out/err"; fail "pull with LoRA adapters"; }
python3 - "$out" "$u2" <<'PY' || fail "LoRA swarm"
import json, os, sys, urllib.request
d, u = sys.argv[1], sys.argv[2]
m = [json.loads(l) for l in open(d + "/lora/metrics.jsonl")]
assert [r["step"] for r in m] == [1, 2], m
for r in m:
    assert r["n_seqs"] == 16 and r["invalid_seqs"] == 0 and r["staleness_max"] == 0, r
    assert r["mismatch_kl"] < 1e-6, r  # the worker decodes base + adapters: the trainer's policy
assert sorted(os.listdir(d + "/wlora/v2")) == ["adapter_config.json", "adapter_model.safetensors"]
# the step records say what moved: the adapter folder's files, not the model
v2 = sum(os.path.getsize(os.path.join(d, "wlora/v2", f)) for f in os.listdir(d + "/wlora/v2"))
assert all(0 < r["publish_bytes"] <= 2 * v2 for r in m), ([r["publish_bytes"] for r in m], v2)
assert all(r["trainable_params"] * 4 < v2 for r in m), ([r["trainable_params"] for r in m], v2)
h = json.load(urllib.request.urlopen(u + "/health", timeout=10))
assert h["version"] == 1 and h["requests_done"] > 0, h  # pulled before each of the 2 steps: v0, v1
PY

# a dead worker is refused before anything is written
set -- $pids
kill -9 "$2"
wait "$2" 2>/dev/null
T --set "output=\"$out/dead\"" --set 'sync.mode="async"' --set sync.staleness=1 >/dev/null 2>"$out/err"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$out/err")" -eq 1 ] && grep -q "rollout.urls\[1\]: .* does not answer GET /health" "$out/err" ||
  { cat "$out/err"; fail "dead worker: exit $rc"; }
[ ! -e "$out/dead" ] || fail "dead worker: wrote $out/dead"
echo "ok"
