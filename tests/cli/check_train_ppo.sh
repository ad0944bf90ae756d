#!/bin/sh
# PPO with a critic (algorithm.advantage "gae": a value head on a copy of
# the policy, GAE, the clipped value loss) in `rlpost train` on
# stories260K (train_fixture.py: 4 prompts x 4 samples, 1 thread):
# - sync, pull and async with η = 0 train on the same numbers: their
#   metrics (the critic's included) equal sync's for 3 steps, bit for bit;
# - the critic learns: its value loss falls and its explained variance
#   rises over 8 steps with critic.warmup_steps 2 (the policy's weights stay
#   in those steps: policy loss 0, no optimizer step, version still + 1);
# - async, kill -9 after a checkpoint, then --resume: steps k+1, k+2 equal
#   the uninterrupted run's bit for bit (η = 0), the checkpoint holding the
#   critic (critic/, an HF *ForTokenClassification folder, and its
#   optimizer state);
# - a saved critic loads as critic.path; misconfigurations exit 2.
# Skips (77) without the shared data or python3.
# Usage: check_train_ppo.sh RLPOST
set -u
rlpost=$1
. "$(dirname "$0")/train_setup.sh"
PPO="algorithm.advantage=\"gae\""
ASYNC="sync.mode=\"async\""
LOOSE='{"rollout_seconds", "reward_seconds", "train_seconds", "publish_seconds", "step_seconds", "tokens_per_second",
        "elapsed_seconds", "trainer_idle_seconds", "rollout_idle_seconds", "buffer_size", "critic_seconds"}'

# --- the same 3 steps in each mode
for m in sync pull async; do
  T --set "output=\"$out/$m\"" --set steps=3 --set "sync.mode=\"$m\"" --set "$PPO" --set critic.lr=1e-3 \
    --set eval.n=0 >"$out/$m.json" 2>"$out/err" || { cat "$out/err"; fail "PPO, 3 steps in $m mode"; }
done
python3 - "$out" <<PY || fail "PPO: the modes differ"
import json, sys
d = sys.argv[1]
load = lambda p: [json.loads(l) for l in open(d + p)]
ref = load("/sync/metrics.jsonl")
assert [r["step"] for r in ref] == [1, 2, 3]
for r in ref:
    for k in ("value_loss", "value_clipfrac", "values_mean", "returns_mean", "value_explained_var", "critic_grad_norm"):
        assert k in r, k
assert ref[0]["values_mean"] == 0.0, ref[0]  # a zero-initialised head: V = 0 at the start
for m in ("pull", "async"):
    for a, b in zip(ref, load("/%s/metrics.jsonl" % m)):
        for key in a:
            if key not in $LOOSE:
                assert a[key] == b[key], (m, a["step"], key, a[key], b[key])
files = set(__import__("os").listdir(d + "/sync/checkpoints/step_3/critic"))
assert {"config.json", "model.safetensors", "optimizer.safetensors"} <= files, files
cfg = json.load(open(d + "/sync/checkpoints/step_3/critic/config.json"))
assert cfg["architectures"] == ["LlamaForTokenClassification"] and len(cfg["id2label"]) == 1, cfg
PY

# --- the critic learns (a reward of 1 for any completion: every return is 1, so V must rise from 0
# to 1 and the value loss fall); warm-up steps leave the policy alone
T --set "output=\"$out/learn\"" --set steps=8 --set "$PPO" --set critic.lr=3e-3 --set critic.warmup_steps=2 \
  --set 'reward.options={"pattern": "."}' --set eval.n=0 --set checkpoint.interval=0 >/dev/null 2>"$out/err" ||
  { cat "$out/err"; fail "PPO, 8 steps"; }
! grep -q "GAE needs" "$out/err" || { cat "$out/err"; fail "PPO: a step's samples were not written"; }
python3 - "$out" <<'PY' || fail "PPO: the critic does not learn"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/learn/samples.jsonl")]
train = [r for r in rows if r["kind"] == "train"]
assert len(train) == 8 * 4 and all(r["advantage"] is None for r in train), len(train)  # per token under GAE
m = [json.loads(l) for l in open(sys.argv[1] + "/learn/metrics.jsonl")]
assert [r["policy_version"] for r in m] == list(range(1, 9)), m
for r in m[:2]:
    assert r["optimizer_steps"] == 0 and r["value_loss"] > 0, r  # warm-up: the critic only
assert all(r["optimizer_steps"] == 1 for r in m[2:]), [r["optimizer_steps"] for r in m]
print("value loss", [round(r["value_loss"], 4) for r in m], "V", [round(r["values_mean"], 3) for r in m])
assert m[-1]["value_loss"] < 0.25 * m[0]["value_loss"], [r["value_loss"] for r in m]
assert m[0]["values_mean"] == 0.0 and m[-1]["values_mean"] > 0.5, [r["values_mean"] for r in m]
PY

# --- async η = 0: kill -9 after a checkpoint, resume, steps k+1 and k+2 against the uninterrupted run
"$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"$out/k9\"" --set "$ASYNC" --set "$PPO" \
  --set critic.lr=1e-3 --set steps=400 --set checkpoint.interval=2 --set eval.n=0 >/dev/null 2>&1 &
pid=$!
i=0
while [ ! -f "$out/k9/checkpoints/latest" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
k=$(sed 's/step_//' "$out/k9/checkpoints/latest")
[ -n "$k" ] || fail "no checkpoint before kill -9"
T --set "output=\"$out/k9\"" --set "$ASYNC" --set "$PPO" --set critic.lr=1e-3 --set steps=$((k + 2)) \
  --set checkpoint.interval=2 --set eval.n=0 --resume "$out/k9" >"$out/k9.json" 2>"$out/err" ||
  { cat "$out/err"; fail "PPO async resume after kill -9"; }
T --set "output=\"$out/k9full\"" --set "$ASYNC" --set "$PPO" --set critic.lr=1e-3 --set steps=$((k + 2)) \
  --set checkpoint.interval=2 --set eval.n=0 >/dev/null 2>"$out/err" || { cat "$out/err"; fail "uninterrupted PPO run"; }
python3 - "$out" "$k" <<PY || fail "PPO: resumed metrics differ from the uninterrupted run"
import json, sys
d, k = sys.argv[1], int(sys.argv[2])
load = lambda p: [json.loads(l) for l in open(d + p)]
full, resumed = load("/k9full/metrics.jsonl"), load("/k9/metrics.jsonl")
assert [r["step"] for r in resumed] == list(range(1, k + 3)), [r["step"] for r in resumed]
for a, b in zip(full[k:], resumed[k:]):
    for key in a:
        if key not in $LOOSE:
            assert a[key] == b[key], (a["step"], key, a[key], b[key])  # bit-exact, the critic's figures too
PY

# --- a saved critic as critic.path; bad configurations
T --set "output=\"$out/fromsaved\"" --set steps=1 --set "$PPO" --set eval.n=0 \
  --set "critic.path=\"$out/sync/checkpoints/step_3/critic\"" >/dev/null 2>"$out/err" ||
  { cat "$out/err"; fail "critic.path = a saved critic"; }
python3 - "$out" <<'PY' || fail "the saved critic's values"
import json, sys
d = sys.argv[1]
a = json.loads(open(d + "/fromsaved/metrics.jsonl").readline())
assert a["values_mean"] != 0.0, a  # trained weights, not a fresh zero head
PY
bad() {
  T --set "output=\"$out/bad\"" --set steps=1 "$@" >/dev/null 2>"$out/err"
  [ $? -eq 2 ] || { cat "$out/err"; fail "exit 2 expected: $*"; }
}
bad --set 'critic.path="policy"'                   # a critic without GAE
bad --set "$PPO" --set algorithm.gae_lambda=1.5
bad --set "$PPO" --set critic.value_clip=-1
bad --set "$PPO" --set "critic.path=\"$model\""   # a language model is no critic
grep -q "critic" "$out/err" || { cat "$out/err"; fail "the message names the critic"; }
bad --set "$PPO" --set "critic.path=\"$out/nowhere\""
bad --set "$PPO" --set distributed.world_size=2        # one rank only, refused before anything forks
if [ -n "${RLPOST_SOURCE_ROOT:-}" ]; then                # a critic of another vocabulary (259 tokens, the policy 512)
  bad --set "$PPO" --set "critic.path=\"$RLPOST_SOURCE_ROOT/tests/reference/fixtures/hf/rm_prm1\""
  grep -q "vocabulary" "$out/err" || { cat "$out/err"; fail "the message names the vocabulary"; }
fi
# a resume continues in the configuration's output: one holding another run is refused
T --set "output=\"$out/sync\"" --set "$PPO" --set critic.lr=1e-3 --set steps=6 --set eval.n=0 --resume "$out/k9" \
  >/dev/null 2>"$out/err"
[ $? -eq 2 ] && grep -q "holds another run" "$out/err" || { cat "$out/err"; fail "a resume into another run's folder"; }
echo "PPO with a critic: ok"
