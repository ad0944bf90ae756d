#!/bin/sh
# `rlpost train` end to end on stories260K (llama2.c, token-level: a
# 512-piece ASCII tokenizer written here stands in for its missing one):
# 2 steps of GRPO on an 8-record JSONL with a regex reward; bad configs exit
# 2 naming the key and write nothing (sync.mode, η, async constraints,
# rollout.urls, reward.library among them); a resume from the step-2 checkpoint
# (at the epoch boundary, public-bugs case #10) reproduces the uninterrupted
# run's steps 3-4 bit for bit with 1 thread (metrics compared exactly);
# kill -9 after a checkpoint and Ctrl-C then resume; a reward loaded from a
# shared object (reward.library) is what trains; `rlpost eval` on a
# checkpoint repeats the run's last evaluation. The sync modes are in
# check_train_modes.sh. Skips (77) without the shared data or python3.
# Usage: check_train_cli.sh RLPOST REWARD_MODULE
set -u
rlpost=$1
reward_so=$2
. "$(dirname "$0")/train_setup.sh"

# --- 2 steps: exit 0, 2 records, eval before and after, a checkpoint, a summary on stdout
T >"$out/sum.json" 2>"$out/err" || { cat "$out/err"; fail "2-step run"; }
python3 - "$out" <<'PY' || exit 1
import json, os, sys
d = sys.argv[1]
m = [json.loads(l) for l in open(d + "/runA/metrics.jsonl")]
assert [r["step"] for r in m] == [1, 2], m
for r in m:
    for k in ("loss", "pg_loss", "grad_norm", "entropy", "reward_mean", "accuracy", "n_tokens", "rollout_seconds",
              "reward_seconds", "train_seconds", "staleness_max", "clip_frac_low", "zero_std_groups"):
        assert k in r, k
    assert r["n_seqs"] == 16 and r["policy_version"] == r["step"], r
e = [json.loads(l) for l in open(d + "/runA/eval.jsonl")]
assert [r["step"] for r in e] == [0, 2], e
s = json.load(open(d + "/sum.json"))
assert s["steps_completed"] == 2 and s["checkpoint"].endswith("step_2"), s
assert open(d + "/runA/checkpoints/latest").read().strip() == "step_2"
st = json.load(open(d + "/runA/checkpoints/step_2/state.json"))
assert st["step"] == 2 and st["version"] == 2 and st["cursor"]["epoch"] == 1 and st["cursor"]["position"] == 0, st
assert json.load(open(d + "/runA/config.json"))["seed"] == 7
PY
[ $? -eq 0 ] || fail "outputs of the 2-step run"

# --- `rlpost eval` on the step-2 checkpoint and on the model: the run's own evaluations, exactly
"$rlpost" eval "$cfg" --set "model=\"$model\"" --checkpoint "$out/runA" >"$out/eval2.json" 2>"$out/err" ||
  { cat "$out/err"; fail "rlpost eval --checkpoint"; }
"$rlpost" eval "$cfg" --set "model=\"$model\"" >"$out/eval0.json" 2>"$out/err" || { cat "$out/err"; fail "rlpost eval"; }
python3 - "$out" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
e = [json.loads(l) for l in open(d + "/runA/eval.jsonl")]
for name, want in (("eval0", e[0]), ("eval2", e[1])):
    got = json.load(open(d + "/%s.json" % name))
    assert got["step"] == want["step"] and got["n"] == 4, (got, want)  # the checkpoint's step, not the weights' version 0
    for k in ("accuracy", "format_rate", "reward_mean", "mean_completion_tokens"):
        assert got[k] == want[k], (name, k, got[k], want[k])
assert json.load(open(d + "/eval2.json"))["model"].endswith("step_2")
PY
[ $? -eq 0 ] || fail "rlpost eval differs from the run's evaluations"

# --- a reward from a shared object: score = 0.5 × completion tokens, so each step's rewards sum to
# 0.5 × its completion_tokens (a reward that was not the library's could not)
T --set "output=\"$out/lib\"" --set "reward.library=\"$reward_so\"" --set 'reward.options={"scale": 0.5}' \
  >/dev/null 2>"$out/err" ||
  { cat "$out/err"; fail "reward.library run"; }
python3 - "$out" <<'PY' || exit 1
import json, sys
m = [json.loads(l) for l in open(sys.argv[1] + "/lib/metrics.jsonl")]
assert [r["step"] for r in m] == [1, 2], m
for r in m:
    assert r["reward_valid"] == 16, r
    total = r["reward_mean"] * r["reward_valid"]
    assert abs(total - 0.5 * r["completion_tokens"]) < 1e-3, (total, r["completion_tokens"])
PY
[ $? -eq 0 ] || fail "the reward library's scores are not what trained"

# --- a weighted reward term: "2.5*regex_match" scores exactly 2.5 × the plain run's step-1 rewards
# (same weights, same seed, so the same completions)
T --set "output=\"$out/w\"" --set steps=1 --set 'reward.name="2.5*regex_match"' >/dev/null 2>"$out/err" ||
  { cat "$out/err"; fail "weighted reward run"; }
python3 - "$out" <<'PY' || exit 1
import json, sys
a = json.loads(open(sys.argv[1] + "/runA/metrics.jsonl").readline())
w = json.loads(open(sys.argv[1] + "/w/metrics.jsonl").readline())
assert a["completion_tokens"] == w["completion_tokens"], (a, w)
assert abs(w["reward_mean"] - 2.5 * a["reward_mean"]) < 1e-9 and a["reward_max"] > 0, (a["reward_mean"], w["reward_mean"])
PY
[ $? -eq 0 ] || fail "the weighted reward is not W × the reward"

# --- matmul_precision "bf16" (oneDNN bf16 GEMMs where the CPU has them, else emulated): one step
# trains, and the effective config records the choice
T --set "output=\"$out/bf16\"" --set steps=1 --set 'matmul_precision="bf16"' >"$out/bf16.summary" 2>"$out/err" ||
  { cat "$out/err"; fail "matmul_precision bf16 run"; }
python3 - "$out" <<'PY' || exit 1
import json, math, sys
m = [json.loads(l) for l in open(sys.argv[1] + "/bf16/metrics.jsonl")]
assert [r["step"] for r in m] == [1] and math.isfinite(m[0]["loss"]) and m[0]["grad_norm"] > 0, m
assert json.load(open(sys.argv[1] + "/bf16/config.json"))["matmul_precision"] == "bf16"
assert json.load(open(sys.argv[1] + "/bf16.summary"))["matmul_precision"] == "bf16"
PY
[ $? -eq 0 ] || fail "matmul_precision bf16 run outputs"

# --- matmul_precision "auto": the summary names what it resolved to, bf16
# exactly where the context's bf16 GEMMs run on the CPU's instructions
T --set "output=\"$out/auto\"" --set steps=1 --set 'matmul_precision="auto"' \
  >"$out/auto.summary" 2>"$out/err" || { cat "$out/err"; fail "matmul_precision auto run"; }
"$rlpost" version >"$out/version.json" || fail "rlpost version"
python3 - "$out" <<'PY' || exit 1
import json, sys
got = json.load(open(sys.argv[1] + "/auto.summary"))["matmul_precision"]
cpu = json.load(open(sys.argv[1] + "/version.json"))["backends"]["cpu"]
native = "bf16 GEMMs (oneDNN)" in cpu["device"]
assert cpu["matmul_auto"] == ("bf16" if native else "fp32"), cpu
assert got == cpu["matmul_auto"], (got, cpu)
assert json.load(open(sys.argv[1] + "/auto/config.json"))["matmul_precision"] == "auto"
PY
[ $? -eq 0 ] || fail "matmul_precision auto run outputs"

# --- CISPO, GMPO (verl's geo_mean) and GPG: one step each, a finite loss and a gradient
for loss in cispo geo_mean gpg; do
  T --set "output=\"$out/loss_$loss\"" --set steps=1 --set "algorithm.policy_loss=\"$loss\"" >/dev/null 2>"$out/err" ||
    { cat "$out/err"; fail "policy_loss $loss"; }
  python3 -c "import json, math, sys; m = [json.loads(l) for l in open(sys.argv[1])]; \
assert len(m) == 1 and math.isfinite(m[0]['loss']) and m[0]['grad_norm'] > 0, m" "$out/loss_$loss/metrics.jsonl" ||
    fail "policy_loss $loss metrics"
done

# --- SAPO, Clip-Cov and KL-Cov: one step each, a finite loss and a gradient (ratio 0.25 so that the
# covariance selection picks tokens of this small batch)
for loss in sapo clip_cov kl_cov; do
  T --set "output=\"$out/loss_$loss\"" --set steps=1 --set "algorithm.policy_loss=\"$loss\"" \
    --set algorithm.clip_cov_ratio=0.25 --set algorithm.clip_cov_lb=-5.0 --set algorithm.kl_cov_ratio=0.25 \
    >/dev/null 2>"$out/err" || { cat "$out/err"; fail "policy_loss $loss"; }
  python3 -c "import json, math, sys; m = [json.loads(l) for l in open(sys.argv[1])]; \
assert len(m) == 1 and math.isfinite(m[0]['loss']) and m[0]['grad_norm'] > 0, m" "$out/loss_$loss/metrics.jsonl" ||
    fail "policy_loss $loss metrics"
done

# --- verl's rollout correction (IS weights, rejection, veto), verl's whitening, DAPO's overlong filter
# and over-sampling: one step each; the step record carries what each did
corr() {  # name, python check of the step record r, --set arguments...
  name=$1; check=$2; shift 2
  T --set "output=\"$out/c_$name\"" --set steps=1 "$@" >/dev/null 2>"$out/err" || { cat "$out/err"; fail "$name"; }
  python3 -c "import json, math, sys; m = [json.loads(l) for l in open(sys.argv[1])]; r = m[0]; \
assert len(m) == 1 and math.isfinite(r['loss']), m; assert $check, r" "$out/c_$name/metrics.jsonl" || fail "$name record"
}
corr is_token "r['rollout_is_mean'] > 0 and r['rollout_is_ess'] <= 1 + 1e-6 and r['grad_norm'] > 0" \
  --set 'algorithm.rollout_is="token"' --set algorithm.rollout_is_threshold=1.5
corr is_seq_norm "r['rollout_is_min'] <= r['rollout_is_max'] and r['grad_norm'] > 0" \
  --set 'algorithm.rollout_is="sequence"' --set algorithm.rollout_is_batch_normalize=true
# thresholds at 1 ± 1e-9: every token's π_old/π_behav differs from 1 by rounding at least somewhere
corr rs_token "0 < r['rollout_rs_masked'] <= 1 and r['rollout_rs_seq_masked'] > 0" \
  --set 'algorithm.rollout_rs="token"' --set algorithm.rollout_rs_threshold=1.0000001 \
  --set algorithm.rollout_rs_threshold_lower=0.9999999
corr rs_geometric "0 <= r['rollout_rs_masked'] <= 1" --set 'algorithm.rollout_rs="geometric"'
corr veto "r['rollout_veto'] == 1 and r['rollout_rs_masked'] == 1 and r['n_tokens'] == 0" \
  --set algorithm.rollout_token_veto=10.0
corr whiten "r['grad_norm'] > 0" --set 'algorithm.advantage="reinforce_pp"' --set 'algorithm.whiten="unbiased"'
corr overlong "r['overlong_filtered'] == r['truncated'] > 0" --set algorithm.overlong_filter=true \
  --set sampling.max_new_tokens=8
# (stories260K with the regex reward gives mostly all-equal groups: step 1 takes several batches)
corr dynamic "r['gen_batches'] > 1 and r['dynamic_dropped_groups'] > 0 and r['filtered_groups'] == 0 and \
r['n_groups'] == 4 and len(r['prompt_index']) == 4" --set algorithm.filter_equal_groups=true \
  --set algorithm.max_gen_batches=20
# the cap: a reward that no sample earns gives only all-equal groups; the step fails saying so
T --set "output=\"$out/c_cap\"" --set steps=1 --set algorithm.filter_equal_groups=true --set algorithm.max_gen_batches=2 \
  --set 'reward.options={"pattern": "^NEVER-MATCHES$"}' >/dev/null 2>"$out/err" && fail "dynamic sampling cap: exit 0"
grep -q "max_gen_batches: 2 batches" "$out/err" || { cat "$out/err"; fail "dynamic sampling cap message"; }

# --- the KL estimators by verl's names (k3 = low_var_kl, clamped; abs): one step each against the
# frozen initial model, a finite KL in the metrics
for est in low_var_kl abs; do
  T --set "output=\"$out/kl_$est\"" --set steps=1 --set algorithm.kl_coef=0.05 \
    --set "algorithm.kl_estimator=\"$est\"" >/dev/null 2>"$out/err" || { cat "$out/err"; fail "kl_estimator $est"; }
  python3 -c "import json, math, sys; m = [json.loads(l) for l in open(sys.argv[1])]; \
assert len(m) == 1 and math.isfinite(m[0]['kl']) and m[0]['kl'] >= 0, m" "$out/kl_$est/metrics.jsonl" ||
    fail "kl_estimator $est metrics"
done

# --- bad configurations: exit 2, the key or path in the one-line message, no output folder
bad() {  # expected-substring, --set arguments...
  want=$1; shift
  rm -rf "$out/bad"
  "$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"$out/bad\"" "$@" >/dev/null 2>"$out/err"
  rc=$?
  [ $rc -eq 2 ] || { cat "$out/err"; fail "$*: exit $rc, wanted 2"; }
  grep -qF -- "$want" "$out/err" || { cat "$out/err"; fail "$*: message lacks '$want'"; }
  [ "$(wc -l <"$out/err")" -eq 1 ] || { cat "$out/err"; fail "$*: more than one line"; }
  [ ! -e "$out/bad" ] || fail "$*: wrote $out/bad"
}
bad "algorithm.clip_hihg" --set algorithm.clip_hihg=0.3
bad "algorithm.rollout_is" --set 'algorithm.rollout_is="geometric"'
bad "algorithm.max_gen_batches" --set algorithm.max_gen_batches=-1
bad "algorithm.max_gen_batches: over-sampling runs in sync.mode" --set 'sync.mode="async"' --set sync.staleness=1 \
  --set algorithm.filter_equal_groups=true --set algorithm.max_gen_batches=5
# the RL options' ranges and contradictions, refused before anything is written
bad "algorithm: rollout_is and tis_cap" --set 'algorithm.rollout_is="token"' --set algorithm.tis_cap=2.0
bad "algorithm: clip_cov_ratio" --set algorithm.clip_cov_ratio=0.0
bad "algorithm: rollout_rs_threshold_lower" --set algorithm.rollout_rs_threshold_lower=3.0
bad "steps: must be an integer" --set 'steps="ten"'
bad "sampling.top_p" --set sampling.top_p=true
bad "model: cannot read" --set 'model="/nonexistent/m.bin"'
bad "/nonexistent/d.jsonl" --set 'task.path="/nonexistent/d.jsonl"'
bad "sync.staleness" --set sync.staleness=-1
bad "sync.staleness: η applies to sync.mode \"async\" only" --set sync.staleness=1
bad "sync.staleness: η applies to sync.mode \"async\" only" --set 'sync.mode="pull"' --set sync.staleness=2
bad "group_size" --set group_size=1
bad "sync.mode: unknown value \"asink\"" --set 'sync.mode="asink"'
bad "matmul_precision: unknown value \"fp16\"" --set 'matmul_precision="fp16"'
bad "sync.staleness" --set 'sync.mode="async"' --set sync.staleness=-1
bad "sync.weights_dir: must be a string" --set sync.weights_dir=3
bad "rollout.urls: needs sync.mode" --set 'rollout.urls=["http://127.0.0.1:1"]'
bad "rollout.urls[0]: \"ftp://h\" is not" --set 'sync.mode="async"' --set 'rollout.urls=["ftp://h"]'
bad "rollout.urls[1]: must be a string" --set 'sync.mode="pull"' --set 'rollout.urls=["http://127.0.0.1:1", 7]'
bad "rollout.urls[1]: repeats rollout.urls[0]" --set 'sync.mode="async"' \
  --set 'rollout.urls=["http://127.0.0.1:1", "http://127.0.0.1:1"]'
bad "rollout.urls[0]: http://127.0.0.1:1 does not answer" --set 'sync.mode="async"' \
  --set 'rollout.urls=["http://127.0.0.1:1"]'
bad "reward.library" --set 'reward.library="/nonexistent/reward.so"'
bad "reward.name: 'x' is not a weight" --set 'reward.name="x*regex_match"'
bad "does not export rlpost_reward_create" --set 'reward.library="libm.so.6"'
# numbers past any sensible run are refused before anything is written (issue 18 items 2 and 8)
bad "steps: must be in [1, 10000000]" --set steps=1000000000000
bad "steps: must be in [1, 10000000]" --set steps=9223372036854775807
bad "eval.n: must be in [0, 100000]" --set eval.n=1000000000
bad "algorithm.ppo_epochs" --set algorithm.ppo_epochs=1000000000
bad "algorithm.clip_high" --set algorithm.clip_high=1e308
bad "algorithm.agg_norm_constant" --set algorithm.agg_norm_constant=-1
bad "eval.samples" --set eval.samples=65
mkdir -p "$out/ro" && chmod 555 "$out/ro"
if [ "$(id -u)" != 0 ]; then
  bad "output" --set "output=\"$out/ro/run\""
fi
"$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"/proc/rlpost/run\"" >/dev/null 2>"$out/err"
[ $? -eq 2 ] && grep -q "output" "$out/err" || { cat "$out/err"; fail "unwritable output"; }

# --- resuming a finished run adds no second final evaluation (issue 18 item 10)
n_eval=$(wc -l <"$out/runA/eval.jsonl")
T --set "output=\"$out/runA\"" --resume "$out/runA" >/dev/null 2>"$out/err" || { cat "$out/err"; fail "resume of a finished run"; }
[ "$(wc -l <"$out/runA/eval.jsonl")" -eq "$n_eval" ] || fail "resume of a finished run appended an evaluation"

# --- resume at the epoch boundary (8 prompts, 4 per step): steps 3-4 equal the uninterrupted run's
T --set "output=\"$out/full\"" --set steps=4 >/dev/null 2>"$out/err" || { cat "$out/err"; fail "4-step run"; }
# the state a kill -9 right after the step-2 checkpoint leaves: checkpoint 2, metrics of step 3 half-done
mkdir -p "$out/killed/checkpoints"
cp -r "$out/full/checkpoints/step_2" "$out/killed/checkpoints/"
echo step_2 >"$out/killed/checkpoints/latest"
# as a checkpoint written before the second-wave algorithm keys existed: they take their defaults there
python3 - "$out/killed/checkpoints/step_2/state.json" <<'PY' || fail "editing the checkpoint"
import json, sys
st = json.load(open(sys.argv[1]))
for k in ("rollout_is", "rollout_rs", "sapo_tau_pos", "whiten", "max_gen_batches", "overlong_filter", "kl_cov_ratio"):
    del st["config"]["algorithm"][k]
json.dump(st, open(sys.argv[1], "w"))
PY
head -n 3 "$out/full/metrics.jsonl" >"$out/killed/metrics.jsonl"
head -n 1 "$out/full/eval.jsonl" >"$out/killed/eval.jsonl"
T --set "output=\"$out/killed\"" --set steps=4 --resume "$out/killed" >"$out/sum2.json" 2>"$out/err" ||
  { cat "$out/err"; fail "resume"; }
# resume from the step-1 checkpoint of a run with checkpoints every step: the 4 prompts not yet seen
T --set "output=\"$out/every\"" --set steps=2 --set checkpoint.interval=1 >/dev/null 2>"$out/err" ||
  { cat "$out/err"; fail "run with checkpoints every step"; }
mkdir -p "$out/one/checkpoints" && cp -r "$out/every/checkpoints/step_1" "$out/one/checkpoints/" &&
  echo step_1 >"$out/one/checkpoints/latest"
T --set "output=\"$out/one\"" --set steps=4 --resume "$out/one" >/dev/null 2>"$out/err" ||
  { cat "$out/err"; fail "resume from step 1"; }
python3 - "$out" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
load = lambda p: [json.loads(l) for l in open(d + p)]
full, killed, one = load("/full/metrics.jsonl"), load("/killed/metrics.jsonl"), load("/one/metrics.jsonl")
assert [r["step"] for r in killed] == [1, 2, 3, 4], [r["step"] for r in killed]
timing = {"rollout_seconds", "reward_seconds", "train_seconds", "step_seconds", "tokens_per_second", "elapsed_seconds",
          "publish_seconds", "trainer_idle_seconds", "rollout_idle_seconds"}
for a, b in zip(full[2:], killed[2:]):
    for k in a:
        if k not in timing:
            assert a[k] == b[k], (a["step"], k, a[k], b[k])  # bit-exact: 1 thread, same seeds
ids = [i for r in full for i in r["prompt_index"]]
assert sorted(ids[:8]) == list(range(8)) and sorted(ids[8:]) == list(range(8)), ids  # each prompt once per epoch
assert full[2]["epoch"] == 1 and killed[2]["epoch"] == 1
assert one[1]["prompt_index"] == full[1]["prompt_index"], (one[1], full[1])  # the rest of epoch 0
assert json.load(open(d + "/sum2.json"))["steps_completed"] == 4
PY
[ $? -eq 0 ] || fail "resumed metrics differ from the uninterrupted run"

# --- DAPO over-sampling across a resume (public-bugs case #10's kind): a step's extra batches cross the
# 8-prompt epoch boundary mid-step; resumed from the step-1 checkpoint, steps 2-3 equal the uninterrupted run's
D() { T --set steps=3 --set checkpoint.interval=1 --set checkpoint.keep=3 --set eval.n=0 \
  --set algorithm.filter_equal_groups=true --set algorithm.max_gen_batches=20 "$@"; }
D --set "output=\"$out/dyn\"" >/dev/null 2>"$out/err" || { cat "$out/err"; fail "dynamic sampling, 3 steps"; }
mkdir -p "$out/dyn2/checkpoints" && cp -r "$out/dyn/checkpoints/step_1" "$out/dyn2/checkpoints/" &&
  echo step_1 >"$out/dyn2/checkpoints/latest"
D --set "output=\"$out/dyn2\"" --resume "$out/dyn2" >/dev/null 2>"$out/err" ||
  { cat "$out/err"; fail "dynamic sampling resume"; }
python3 - "$out" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
a = [json.loads(l) for l in open(d + "/dyn/metrics.jsonl")]
b = [json.loads(l) for l in open(d + "/dyn2/metrics.jsonl")]
assert [r["step"] for r in a] == [1, 2, 3] and [r["step"] for r in b][-2:] == [2, 3], (a, b)
assert sum(r["gen_batches"] for r in a) > 3, [r["gen_batches"] for r in a]  # over-sampling happened
timing = {"rollout_seconds", "reward_seconds", "train_seconds", "step_seconds", "tokens_per_second", "elapsed_seconds",
          "publish_seconds", "trainer_idle_seconds", "rollout_idle_seconds"}
for x, y in zip(a[1:], b[-2:]):
    for k in x:
        if k not in timing:
            assert x[k] == y[k], (x["step"], k, x[k], y[k])  # bit-exact: 1 thread, same seeds and cursor
PY
[ $? -eq 0 ] || fail "dynamic sampling: resumed steps differ from the uninterrupted run"

# --- a real kill -9 after a checkpoint, then resume to the end
"$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"$out/k9\"" --set steps=400 --set checkpoint.interval=2 \
  --set eval.n=0 >/dev/null 2>&1 &
pid=$!
i=0
while [ ! -f "$out/k9/checkpoints/latest" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
k=$(sed 's/step_//' "$out/k9/checkpoints/latest")
[ -n "$k" ] || fail "no checkpoint before kill -9"
T --set "output=\"$out/k9\"" --set steps=$((k + 2)) --set checkpoint.interval=2 --set eval.n=0 --resume "$out/k9" \
  >"$out/sum3.json" 2>"$out/err" || { cat "$out/err"; fail "resume after kill -9"; }
grep -q "\"steps_completed\":$((k + 2))" "$out/sum3.json" || { cat "$out/sum3.json"; fail "kill -9 resume"; }

# --- a run killed before its first checkpoint (issue 18 item 4): --resume of
# its output folder starts it again from step 0 over its own files; a plain
# re-run is refused with the way out, as is a resume whose configuration
# differs or that names another folder
"$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"$out/k0\"" --set steps=400 --set eval.n=0 --set checkpoint.interval=0 \
  >/dev/null 2>"$out/k0.err" &
pid=$!
i=0
while ! grep -q "^step 2/" "$out/k0.err" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
[ -e "$out/k0/checkpoints/latest" ] && fail "kill -9 before a checkpoint: there is one"
T --set "output=\"$out/k0\"" --set steps=3 --set eval.n=0 --set checkpoint.interval=0 >/dev/null 2>"$out/err"
[ $? -eq 2 ] && grep -q "already holds a run; resume it with --resume" "$out/err" || { cat "$out/err"; fail "re-run refused"; }
T --set "output=\"$out/k0\"" --set steps=3 --set eval.n=0 --set checkpoint.interval=0 --set seed=99 --resume "$out/k0" >/dev/null 2>"$out/err"
[ $? -eq 2 ] && grep -q '"seed" differs' "$out/err" || { cat "$out/err"; fail "restart with another seed refused"; }
T --set "output=\"$out/k0b\"" --set steps=3 --set eval.n=0 --set checkpoint.interval=0 --resume "$out/k0" >/dev/null 2>"$out/err"
[ $? -eq 2 ] && grep -q "resuming its output folder" "$out/err" || { cat "$out/err"; fail "restart into another folder"; }
T --set "output=\"$out/k0\"" --set steps=3 --set eval.n=0 --set checkpoint.interval=0 --resume "$out/k0" >"$out/sum5.json" 2>"$out/err" ||
  { cat "$out/err"; fail "resume of a run killed before its first checkpoint"; }
grep -q "starting it again from step 0" "$out/err" || { cat "$out/err"; fail "restart message"; }
python3 - "$out" <<'PY' || fail "restarted run's files"
import json, sys
d = sys.argv[1] + "/k0/"
steps = [json.loads(l)["step"] for l in open(d + "metrics.jsonl")]
assert steps == [1, 2, 3], steps
assert json.load(open(sys.argv[1] + "/sum5.json"))["steps_completed"] == 3
# the killed run's samples are gone: each step's records once
ss = [json.loads(l)["step"] for l in open(d + "samples.jsonl")]
assert sorted(set(ss)) == [1, 2, 3] and all(ss.count(k) == ss.count(1) for k in (2, 3)), ss
PY

# --- periodic checkpoints (issue 18 item 11): by steps, keeping the newest
# checkpoint.keep (a crash's half-written .tmp-step_* goes too); by minutes
# (here 6 ms: one after every step); ranges checked before anything is written
mkdir -p "$out/ck/checkpoints/.tmp-step_9"
T --set "output=\"$out/ck\"" --set steps=4 --set eval.n=0 --set checkpoint.interval=1 --set checkpoint.keep=2 \
  >/dev/null 2>"$out/err" || { cat "$out/err"; fail "checkpoint.keep"; }
[ "$(cd "$out/ck/checkpoints" && ls -A | tr '\n' ' ')" = "latest step_3 step_4 " ] ||
  { ls -A "$out/ck/checkpoints"; fail "checkpoint.keep=2 left other checkpoints"; }
T --set "output=\"$out/cm\"" --set steps=3 --set eval.n=0 --set checkpoint.interval=0 --set checkpoint.minutes=0.0001 \
  --set checkpoint.keep=0 >/dev/null 2>"$out/err" || { cat "$out/err"; fail "checkpoint.minutes"; }
[ "$(cd "$out/cm/checkpoints" && ls -A | tr '\n' ' ')" = "latest step_1 step_2 step_3 " ] ||
  { ls -A "$out/cm/checkpoints"; fail "timed checkpoints"; }
for bad in checkpoint.minutes=-1 checkpoint.keep=-1 checkpoint.minutes=1e9; do
  T --set "output=\"$out/cbad\"" --set "$bad" >/dev/null 2>"$out/err"
  [ $? -eq 2 ] && [ ! -e "$out/cbad" ] || { cat "$out/err"; fail "$bad accepted or wrote the folder"; }
done

# --- Ctrl-C: finish the step, checkpoint, exit 0
"$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"$out/int\"" --set steps=100000 --set eval.n=0 \
  >"$out/sum4.json" 2>"$out/int.err" &
pid=$!
i=0
# (a file of its own: "$out/err" still holds the previous run's "step 3/4", and a SIGINT sent
# before the driver installs its handler ends it with status 130)
while ! grep -q "^step 3/" "$out/int.err" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 0 ] || { cat "$out/int.err"; fail "SIGINT: exit $rc"; }
grep -q '"interrupted":true' "$out/sum4.json" || fail "SIGINT: no interrupted summary"
[ -f "$out/int/checkpoints/latest" ] || fail "SIGINT: no checkpoint"

# --- the same built-in twice in a combined reward: one reward_terms key per term
T --set "output=\"$out/twice\"" --set steps=1 --set eval.n=0 --set samples.per_step=1 \
  --set 'reward.name="regex_match+2*regex_match"' >/dev/null 2>"$out/err" || { cat "$out/err"; fail "regex_match twice"; }
python3 - "$out/twice/samples.jsonl" <<'PY' || fail "reward_terms of a repeated built-in"
import json, sys
rec = json.loads(open(sys.argv[1]).readline())
assert sorted(rec["reward_terms"]) == ["regex_match", "regex_match#2"], rec["reward_terms"]
PY

# --- no configuration value reaches a shell or gnuplot's command language
# (issue 18 item 1): an output folder whose name quotes its way out of a
# shell string and out of a gnuplot string still gets its plot, and nothing
# it names runs
if command -v gnuplot >/dev/null 2>&1; then
  evil="$out/x'\$(touch $out/pwned1)'; system('touch $out/pwned2'); '"
  mkdir -p "$out/cwd" && (cd "$out/cwd" && "$rlpost" train "$cfg" --set "model=\"$model\"" --set steps=1 \
    --set eval.n=0 --set "output=$evil" >"$out/evil.json" 2>"$out/evil.err") || { cat "$out/evil.err"; fail "quoted output"; }
  for f in "$out/pwned1" "$out/pwned2" "$out/cwd/pwned1" "$out/cwd/pwned2"; do
    [ ! -e "$f" ] || fail "a command in the output path ran ($f)"
  done
  [ -s "$evil/training.png" ] || { cat "$out/evil.err"; fail "no plot in the quoted output folder"; }
fi
echo "ok"
