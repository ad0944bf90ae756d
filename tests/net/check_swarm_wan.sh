#!/bin/sh
# Echo's asynchronous swarm across emulated WAN hosts, with churn (issue
# #26): 9 network-namespace hosts (tests/cli/netns_hosts.sh) joined by the
# userspace WAN switch (tests/net/wan_switch.c) at 50 ms ± 10 ms each way,
# 1 % frame loss and 100 Mbit/s on every crossing.
# - host 0: `rlpost train` (stories260K with train_fixture.py's config,
#   sync.mode async, η = 1, 16 steps of 8 prompts x 4 samples, rollout.urls
#   = the 8 workers) publishing into a folder that `rlpost weights-serve`
#   on host 0 serves as the relay origin;
# - hosts 1-8: workers w0-w7, `rlpost serve --host 0.0.0.0 --token-file
#   --weights-dir MIRROR --weights-from PARENT --weights-from ORIGIN` in a
#   fan-out-2 tree: w0, w1 from the origin, w2, w3 from w0, w4, w5 from w1,
#   w6, w7 from w2 (the origin as every node's fallback);
# - churn mid-run: once step 3 is done, w1 (the relay parent of w4 and w5)
#   and w7 (a leaf) are killed with SIGKILL and restarted 4 s later on the
#   same port with the same mirror (w4 and w5 meanwhile pull from the
#   origin, their fallback: asserted from their logs); once step 6 is done,
#   the links of w0 (the parent of w2 and w3) and of w6 (a leaf) are cut for
#   10 s (w2 and w3 mostly wait for w0 rather than fall back: a cut transfer
#   stalls for up to 10 s before the relay gives up on a parent);
# - asserted: exit 0 and every step; per step 8 groups (n_groups), 32
#   samples, all valid (nothing lost to a dead worker), staleness_max ≤ η
#   (per step and in the summary); no group trained twice: samples.jsonl
#   (samples.per_step = every sample) holds each group id in one step only,
#   4 samples each, 8 groups a step; nothing lost: groups trained + dropped
#   as stale (buffer_dropped_total, = the sum of buffer_dropped) + held in
#   the buffer at the last step is a whole number of 8-group batches (the
#   rollout side pushes whole batches); with nothing dropped every step
#   trained one whole epoch (the 8 prompts once each), otherwise the prompts
#   missing from the epochs are at most the dropped groups; and exactly, from
#   the summary's "groups" (rlp_trainer_async_stats): accepted = consumed +
#   dropped + held, consumed = steps x 8, pushed = accepted;
#   every worker (the restarted ones too) ends at the trainer's last
#   version (its /health), and every mirror holds the origin's manifest and
#   last version byte for byte.
# With --bench: no churn; the same swarm (a fresh tree per run) trains under
# the WAN profile and with a zero-delay, loss-free, unlimited switch, and
# the script prints the throughput (completions and tokens per second of
# training, steps 2..S from metrics.jsonl, the first step's warm-up left
# out) of each and their ratio. Options: --eta N, --steps N,
# --max-new-tokens N, --prompts N (prompts per step; keep it a multiple of 8,
# the fixture's prompts), --profile "SWITCH OPTIONS" (the WAN profile).
# Measured on the 2-core machine (ratio of completions/s, WAN / flat):
# 128 prompts a step, η = 2: 1.02-1.06; η = 1: 0.72-0.83; 32 prompts, η = 2:
# 0.40-0.50; 8 prompts: 0.14-0.28 (η 1-4). Small steps are bound by the
# dissemination latency (about 1.3 s to the deepest worker over these links)
# against a 0.12 s flat step: η would have to be about 13 (docs/PERFORMANCE.md).
# Usage: check_swarm_wan.sh RLPOST WAN_SWITCH [--bench] [options]. Skips
# (77) without root/namespaces, the shared data, python3 or curl.
set -u
rlpost=$1
wan=$2
shift 2
bench=0 eta=1 steps=16 mnt=24 prompts=8
profile="--delay-ms 50 --jitter-ms 10 --loss 1 --rate-mbit 100"
while [ $# -gt 0 ]; do
  case $1 in
    --bench) bench=1 ;;
    --eta) eta=$2; shift ;;
    --steps) steps=$2; shift ;;
    --max-new-tokens) mnt=$2; shift ;;
    --prompts) prompts=$2; shift ;;
    --profile) profile=$2; shift ;;
    *) echo "check_swarm_wan.sh: unknown option $1"; exit 2 ;;
  esac
  shift
done
here=$(cd "$(dirname "$0")" && pwd)
data=${RLPOST_SHARED_DATA:-}/llama2c/stories260K.bin
[ -n "${RLPOST_SHARED_DATA:-}" ] && [ -f "$data" ] || { echo "no stories260K.bin: skipped"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
command -v curl >/dev/null 2>&1 || { echo "curl not found: skipped"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() {
  echo "FAIL: $*"
  for f in "$out"/*/train.log "$out"/*/w*.log "$out"/*/origin.log; do
    [ -f "$f" ] && { echo "--- $f"; tail -6 "$f"; }
  done
  # keep the run for a look (not the model copies)
  [ -n "${SWARM_WAN_KEEP:-}" ] && { rm -rf "$SWARM_WAN_KEEP"; cp -r "$out" "$SWARM_WAN_KEEP"; }
  exit 1
}
. "$here/../cli/netns_hosts.sh"
. "$here/swarm_lib.sh"
swarm_fixture swarm-wan-token-26
NW=8
hosts_make_wan $((NW + 1)) "$wan"
O="http://$(host_ip 0):8100"

# (ip netns exec, not the host_run function, in the background: $! is then
# the pid of the server itself, which execs from ip, not of a subshell)
# worker_start K: worker wK on host K+1, port 8000, mirror $d/mK
worker_start() {
  _k=$1
  if [ "$_k" -lt 2 ]; then _from="--weights-from $O"
  else _from="--weights-from http://$(host_ip $(((_k - 2) / 2 + 1))):8000 --weights-from $O"; fi
  # shellcheck disable=SC2086
  ip netns exec "$(host_ns $((_k + 1)))" "$rlpost" serve "$model" --host 0.0.0.0 --port 8000 --threads 1 --token-file "$out/token" \
    --weights-dir "$d/m$_k" $_from --weights-poll-s 0.2 >"$d/w$_k.out" 2>>"$d/w$_k.log" &
  eval "wpid$_k=\$!"
}
# swarm_up NAME: the origin and the 8 workers, in $out/NAME
swarm_up() {
  d=$out/$1
  mkdir -p "$d/weights"
  ip netns exec "$(host_ns 0)" "$rlpost" weights-serve "$d/weights" --host "$(host_ip 0)" --port 8100 --token-file "$out/token" \
    >"$d/origin.out" 2>"$d/origin.log" &
  origin_pid=$!
  wait_listening "$d/origin.out" origin
  urls=""
  k=0
  while [ $k -lt $NW ]; do
    worker_start $k
    urls="$urls${urls:+, }\"http://$(host_ip $((k + 1))):8000\""
    k=$((k + 1))
  done
  k=0
  while [ $k -lt $NW ]; do wait_listening "$d/w$k.out" "w$k"; k=$((k + 1)); done
}
swarm_down() {
  k=0
  while [ $k -lt $NW ]; do eval "kill -9 \$wpid$k 2>/dev/null; wait \$wpid$k 2>/dev/null"; k=$((k + 1)); done
  kill -9 "$origin_pid" 2>/dev/null
  wait "$origin_pid" 2>/dev/null
}
# train_start: `rlpost train` on host 0 in the background ($train_pid)
train_start() {
  ip netns exec "$(host_ns 0)" env RLPOST_SERVE_TOKEN=$TOKEN "$rlpost" train "$cfg" --set "model=\"$model\"" \
    --set "rollout.urls=[$urls]" --set "sync.weights_dir=\"$d/weights\"" --set "output=\"$d/run\"" \
    --set 'sync.mode="async"' --set sync.staleness="$eta" --set steps="$steps" --set eval.n=0 \
    --set prompts_per_step="$prompts" --set samples.per_step=$((prompts * 4)) --set checkpoint.interval=0 \
    --set sampling.max_new_tokens="$mnt" >"$d/train.json" 2>"$d/train.log" &
  train_pid=$!
}

if [ $bench = 1 ]; then
  # the same swarm under the WAN profile and over an ideal switch, a fresh
  # tree and weights folder for each (the relay only moves forward)
  for run in wan flat; do
    if [ $run = wan ]; then
      # shellcheck disable=SC2086
      hosts_wan_profile $profile --stats "$out/wan-stats.json"
    else
      hosts_wan_profile
    fi
    swarm_up $run
    train_start
    wait "$train_pid" || fail "$run: rlpost train exited $?"
    swarm_down
  done
  hosts_wan_profile
  [ -n "${SWARM_WAN_KEEP:-}" ] && { rm -rf "$SWARM_WAN_KEEP"; cp -r "$out" "$SWARM_WAN_KEEP"; rm -f "$SWARM_WAN_KEEP/model.bin"; }
  python3 - "$out" "$eta" "$steps" "$profile" <<'PY' || fail "bench"
import json, sys
d, eta, steps, profile = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def rate(run):
    m = [json.loads(l) for l in open("%s/%s/run/metrics.jsonl" % (d, run))]
    assert len(m) == steps, (run, len(m))
    t = m[-1]["elapsed_seconds"] - m[0]["elapsed_seconds"]
    c = sum(r["completions"] for r in m[1:])
    k = sum(r["completion_tokens"] for r in m[1:])
    idle = sum(r["trainer_idle_seconds"] for r in m[1:]) / (len(m) - 1)
    st = sum(r["step_seconds"] for r in m[1:]) / (len(m) - 1)
    tr = sum(r["train_seconds"] + r["publish_seconds"] for r in m[1:]) / (len(m) - 1)
    ro = sum(r["rollout_seconds"] for r in m[1:]) / (len(m) - 1)
    print("%-4s: %.2f completions/s, %.1f tokens/s (steps 2-%d: %.2f s); mean step %.3f s, trainer idle %.3f s, "
          "train+publish %.3f s, rollout side's pulls+generate %.3f s, staleness_max %d"
          % (run, c / t, k / t, steps, t, st, idle, tr, ro, max(r["staleness_max"] for r in m)))
    return c / t, k / t
w, f = rate("wan"), rate("flat")
print("swarm WAN throughput ratio (WAN / flat, eta %d, profile %s): completions %.3f, tokens %.3f"
      % (eta, profile, w[0] / f[0], w[1] / f[1]))
try:
    s = json.load(open(d + "/wan-stats.json"))
    print("WAN switch:", json.dumps(s)[:400])
except Exception:
    pass
PY
  exit 0
fi

# ---- the test: the WAN profile, churn mid-run
# shellcheck disable=SC2086
hosts_wan_profile $profile
swarm_up run
train_start
t0=$(date +%s)
wait_steps 3
kill -0 "$train_pid" 2>/dev/null || fail "the trainer ended before the churn (step $(steps_done))"
churn1=$(steps_done)
kill -9 "$wpid1" "$wpid7"
wait "$wpid1" 2>/dev/null
wait "$wpid7" 2>/dev/null
sleep 4
worker_start 1
worker_start 7
wait_listening "$d/w1.out" "w1 (restarted)"
wait_listening "$d/w7.out" "w7 (restarted)"
wait_steps 6
kill -0 "$train_pid" 2>/dev/null || fail "the trainer ended before the link cut (step $(steps_done))"
churn2=$(steps_done)
link_cut 1
link_cut 7
sleep 10
link_heal 1
link_heal 7
churn3=$(steps_done)
kill -0 "$train_pid" 2>/dev/null || fail "the trainer ended during the link cut (step $churn3)"
wait "$train_pid"
rc=$?
t1=$(date +%s)
[ $rc -eq 0 ] || fail "rlpost train exited $rc"
echo "churn: kill -9 w1, w7 after step $churn1; links of w0, w6 cut after step $churn2, healed after step $churn3;" \
  "training took $((t1 - t0)) s"

# every worker at the last version (the relay brings it; 60 s at most)
k=0
while [ $k -lt $NW ]; do
  j=0
  while [ "$(health $k)" != "$steps" ]; do
    j=$((j + 1))
    [ $j -lt 120 ] || fail "w$k is at weight version $(health $k), not $steps"
    sleep 0.5
  done
  k=$((k + 1))
done
# every mirror: the origin's manifest and last version, byte for byte
k=0
while [ $k -lt $NW ]; do
  cmp -s "$d/weights/latest.json" "$d/m$k/latest.json" || fail "w$k: manifest differs from the origin's"
  for g in "$d/weights/v$steps"/*; do
    cmp -s "$g" "$d/m$k/v$steps/${g##*/}" || fail "w$k: v$steps/${g##*/} differs from the origin's"
  done
  k=$((k + 1))
done
grep -q "weight version $steps (mirrored" "$d/w1.log" && grep -q "weight version $steps (mirrored" "$d/w7.log" ||
  fail "a restarted worker did not mirror the last version"
# w1's children went to the origin while w1 was down
grep -q "GET http://$(host_ip 2):8000/.*Couldn't connect to server; trying $O" "$d/w4.log" ||
  grep -q "GET http://$(host_ip 2):8000/.*Couldn't connect to server; trying $O" "$d/w5.log" ||
  fail "w4 and w5 did not fall back to the origin while their parent w1 was down"

python3 - "$d" "$eta" "$steps" "$prompts" <<'PY' || fail "swarm accounting"
import collections, json, sys
d, eta, steps, P = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
G = 4  # group_size of train_fixture.py
s = json.load(open(d + "/train.json"))
assert s["steps_completed"] == steps and s["sync_mode"] == "async" and not s["interrupted"], s
assert s["staleness_max"] <= eta, s
m = [json.loads(l) for l in open(d + "/run/metrics.jsonl")]
assert [r["step"] for r in m] == list(range(1, steps + 1)), [r["step"] for r in m]
assert [r["policy_version"] for r in m] == list(range(1, steps + 1)), [r["policy_version"] for r in m]
for r in m:
    # a full step of valid samples: a group whose worker died was generated again, not lost
    assert r["n_groups"] == P and r["completions"] == P * G and r["n_seqs"] == P * G, r
    assert r["reward_valid"] == P * G and r["invalid_seqs"] == 0, r
    assert 0 <= r["staleness_max"] <= eta, r
    assert len(r["prompt_index"]) == P, r
dropped = m[-1]["buffer_dropped_total"]
assert dropped == sum(r["buffer_dropped"] for r in m), "buffer_dropped does not add up"
# the rollout side pushes whole batches of P groups: what the trainer has
# seen of them by its last pull (trained + dropped as stale + still in the
# buffer) is a whole number of batches, at least one per step
seen = sum(r["n_groups"] for r in m) + dropped + m[-1]["buffer_size"]
assert seen % P == 0 and seen >= steps * P, ("groups trained + dropped + held", seen)
# and exactly, from the trainer's counters (rlp_trainer_async_stats): every
# group the buffer accepted was consumed by a step once, dropped as stale,
# or is still held; the steps consumed steps x P; the rollout side pushed
# no group the buffer did not account for
g = s["groups"]
assert g["accepted"] + g["restored"] == g["consumed"] + g["dropped_stale"] + g["held"], g
assert g["consumed"] == steps * P and g["dropped_stale"] >= dropped, (g, dropped)
assert g["pushed"] == g["accepted"], g
# no group trained twice: every training sample is recorded (samples.per_step = P x G)
by_group = collections.defaultdict(list)
n_train = 0
for l in open(d + "/run/samples.jsonl"):
    x = json.loads(l)
    if x["kind"] != "train":
        continue
    n_train += 1
    by_group[x["group_id"]].append(x["step"])
assert n_train == steps * P * G, n_train
for g, st in by_group.items():
    assert len(st) == G and len(set(st)) == 1, ("group %d trained in steps %s" % (g, st))
per_step = collections.Counter(st[0] for st in by_group.values())
assert all(per_step[k] == P for k in range(1, steps + 1)), per_step
# prompts: the task serves each of its 8 prompts once per epoch, in batches
# of P; the trainer consumed them in order
seq = [i for r in m for i in r["prompt_index"]]
if dropped == 0:
    # nothing dropped: the consumed groups are exactly the first steps x P of the curriculum
    for e in range(len(seq) // 8):
        assert sorted(seq[8 * e:8 * e + 8]) == list(range(8)), ("epoch", e, seq[8 * e:8 * e + 8])
    assert m[0]["epoch"] == 0 and all(r["epoch"] == (k * P) // 8 for k, r in enumerate(m)), [r["epoch"] for r in m]
else:
    # dropped groups leave holes: within an epoch no prompt twice, and the
    # holes are the dropped groups
    seen, holes, epoch = set(), 0, 0
    for i in seq:
        if i in seen:  # a new epoch
            holes += 8 - len(seen)
            seen = set()
        seen.add(i)
    print("note: %d groups dropped as stale, %d held at the end; %d prompts missing from completed epochs"
          % (dropped, m[-1]["buffer_size"], holes))
    assert holes <= dropped, (holes, dropped)
print("swarm over WAN: %d steps, %d groups trained once each, %d dropped as stale, staleness max %g (eta %d), "
      "wall %.1f s" % (steps, len(by_group), dropped, s["staleness_max"], eta, s["wall_seconds"]))
PY
[ -n "${SWARM_WAN_KEEP:-}" ] && { rm -rf "$SWARM_WAN_KEEP"; cp -r "$out" "$SWARM_WAN_KEEP"; }
echo ok
