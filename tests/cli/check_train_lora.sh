#!/bin/sh
# `rlpost train` with LoRA (lora.rank > 0) on stories260K (train_fixture.py:
# 4 prompts x 4 samples, 1 thread, fp32 rollouts):
# - the run starts with the adapters' size on stderr and trains: every
#   step's grad_norm is finite and non-zero, and the policy moves (the
#   step-2 logprob-ratio metrics differ from a run with lr = 0);
# - the checkpoint keeps the frozen base and the adapters apart
#   (model.safetensors = the base bit for bit, adapter/ = a PEFT folder
#   with the run's rank, alpha and targets);
# - pull and async (η = 0), whose engines hold the merged W + s·B·A, give
#   the same metrics for 4 steps; sync, whose KV-cached decode runs the
#   adapters unmerged on the policy's own weights, equals them at step 1
#   (B = 0) and differs later by rounding only (test_lora checks the
#   unmerged decode against the forward);
# - --resume of the step-2 checkpoint: steps 3-4 equal the uninterrupted
#   run's, bit for bit (adapters, their AdamW moments and the base);
# - algorithm.kl_coef > 0 takes the base under the adapters as π_ref (no
#   second model): KL 0 at step 1 (B = 0), > 0 once the adapters moved;
# - a resume whose lora settings differ is refused by name; a bad rank or
#   target is refused before anything runs.
# Skips (77) without the shared data or python3.
# Usage: check_train_lora.sh RLPOST
set -u
rlpost=$1
. "$(dirname "$0")/train_setup.sh"
L() { T --set lora.rank=4 --set lora.alpha=8 --set "lora.targets=\"q_proj,v_proj,down_proj\"" "$@"; }

for m in sync pull async; do
  L --set "output=\"$out/$m\"" --set steps=4 --set "sync.mode=\"$m\"" >"$out/$m.json" 2>"$out/err.$m" ||
    { cat "$out/err.$m"; fail "4 LoRA steps in $m mode"; }
done
grep -q "^lora: rank 4, alpha 8, targets q_proj,v_proj,down_proj, base f32: [0-9]* trainable parameters" "$out/err.sync" ||
  { cat "$out/err.sync"; fail "the adapters' size on stderr"; }
L --set "output=\"$out/still\"" --set steps=4 --set optimizer.lr=0 >/dev/null 2>"$out/err" ||
  { cat "$out/err"; fail "lr = 0"; }
L --set "output=\"$out/kl\"" --set steps=3 --set algorithm.kl_coef=0.05 >/dev/null 2>"$out/err" ||
  { cat "$out/err"; fail "a KL term against the base (adapters off)"; }
L --set "output=\"$out/half\"" --set steps=2 >/dev/null 2>"$out/err" || { cat "$out/err"; fail "2 steps"; }
L --set "output=\"$out/half\"" --set steps=4 --resume "$out/half" >/dev/null 2>"$out/err" ||
  { cat "$out/err"; fail "resume of a LoRA run"; }
T --set "output=\"$out/half\"" --set steps=5 --resume "$out/half" >/dev/null 2>"$out/err" &&
  fail "a resume without the run's lora settings was accepted"
grep -q '"lora" differs' "$out/err" || { cat "$out/err"; fail "the refusal names lora"; }
L --set "output=\"$out/bad\"" --set "lora.targets=\"q_proj,lm_head\"" >/dev/null 2>"$out/err" &&
  fail "an unknown target was accepted"
grep -q "lm_head" "$out/err" || { cat "$out/err"; fail "the refusal names the target"; }
L --set "output=\"$out/bad2\"" --set lora.rank=100000 >/dev/null 2>"$out/err" && fail "rank 100000 was accepted"
grep -q "rank" "$out/err" || { cat "$out/err"; fail "the refusal names the rank"; }

python3 - "$out" "$model" <<'PY' || exit 1
import json, math, os, struct, sys
d, model = sys.argv[1], sys.argv[2]
load = lambda p: [json.loads(l) for l in open(d + p)]
loose = {"rollout_seconds", "reward_seconds", "train_seconds", "publish_seconds", "step_seconds", "tokens_per_second",
         "elapsed_seconds", "trainer_idle_seconds", "rollout_idle_seconds", "buffer_size"}
sync = load("/sync/metrics.jsonl")
assert [r["step"] for r in sync] == [1, 2, 3, 4]
assert all(math.isfinite(r["grad_norm"]) for r in sync)
assert any(r["grad_norm"] > 0 for r in sync), [r["grad_norm"] for r in sync]
print("sync:", [(r["reward_mean"], round(r["grad_norm"], 4)) for r in sync])
import re
n_lora = int(re.search(r"(\d+) trainable parameters", open(d + "/err.sync").read()).group(1))
assert all(r["trainable_params"] == n_lora for r in sync), (n_lora, [r["trainable_params"] for r in sync])
assert all(r["publish_bytes"] == 0 for r in sync)  # sync mode: the engine shares the policy
# pull and async (η = 0) engines decode the merged W + s·B·A: the same
# numbers for 4 steps. sync decodes the adapters unmerged on the policy's
# own weights: rounding apart, so equal at step 1 (B = 0 there) and free to
# sample differently later
pull, asy = load("/pull/metrics.jsonl"), load("/async/metrics.jsonl")
assert len(pull) == len(asy) == 4
for a, b in zip(pull, asy):
    for k in a:
        if k not in loose:
            assert a[k] == b[k], ("async", a["step"], k, a[k], b[k])
for k in sync[0]:
    if k not in loose:
        assert sync[0][k] == pull[0][k], ("sync step 1", k, sync[0][k], pull[0][k])
still = load("/still/metrics.jsonl")
assert still[0]["reward_mean"] == sync[0]["reward_mean"]  # step 1 samples before any update
# with lr = 0 the adapters stay at B = 0: the first step with a gradient
# changes what the run samples next, or its logprob ratios
first = next(i for i, r in enumerate(sync) if r["grad_norm"] > 0)
assert first + 1 < len(sync), "no step after the first update"
assert sync[first + 1]["entropy"] != still[first + 1]["entropy"], "the adapters did not move the policy"

kl = load("/kl/metrics.jsonl")
assert kl[0]["kl"] == 0.0 or abs(kl[0]["kl"]) < 1e-9, kl[0]["kl"]  # B = 0 at step 1: the policy is its base
assert any(r["kl"] > 0 for r in kl[1:]), [r["kl"] for r in kl]
half = load("/half/metrics.jsonl")
assert [r["step"] for r in half] == [1, 2, 3, 4], [r["step"] for r in half]
for a, b in zip(sync, half):
    for k in a:
        if k not in loose:
            assert a[k] == b[k], ("resume", a["step"], k, a[k], b[k])
# the checkpoint: base apart from a PEFT adapter folder
ck = d + "/sync/checkpoints"
steps = sorted(x for x in os.listdir(ck) if x.startswith("step_"))
c = ck + "/" + steps[-1]
cfg = json.load(open(c + "/adapter/adapter_config.json"))
assert cfg["peft_type"] == "LORA" and cfg["r"] == 4 and cfg["lora_alpha"] == 8.0, cfg
assert sorted(cfg["target_modules"]) == ["down_proj", "q_proj", "v_proj"], cfg
assert os.path.getsize(c + "/adapter/adapter_model.safetensors") < os.path.getsize(c + "/model.safetensors") / 4
# model.safetensors holds the base, not the merged model: the same bytes as
# the lr = 0 run's (whose adapters stayed at B = 0), while the adapters differ
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    return {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in hdr.items()
            if k != "__metadata__"}
c0 = d + "/still/checkpoints/" + steps[-1]
assert tensors(c + "/model.safetensors") == tensors(c0 + "/model.safetensors"), "the checkpoint's base moved"
ad, ad0 = tensors(c + "/adapter/adapter_model.safetensors"), tensors(c0 + "/adapter/adapter_model.safetensors")
assert ad.keys() == ad0.keys() and len(ad) == 5 * 3 * 2 and ad != ad0
print("LoRA: pull = async over 4 steps, sync = them at step 1, resume bit-exact, base kept, adapter %s" % steps[-1])
PY
