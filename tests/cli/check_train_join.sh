#!/bin/sh
# The swarm's coordinator (swarm.listen) and `rlpost serve --join` on
# loopback, without root (tests/net/check_swarm_join.sh runs the same over
# emulated WAN hosts with churn):
# - configuration refused with one line, exit 2: swarm.listen without a
#   token, not HOST:PORT, with sync.mode "sync"; suspect_s not above
#   heartbeat_s; min_workers without swarm.listen; `rlpost serve --join`
#   without --weights-dir or a token, --advertise without --join;
# - the routes while a trainer waits for swarm.min_workers (64): 401
#   without or with a wrong token, 404 unknown path and heartbeat of an
#   unknown id, 405, 400 on bodies that are not the fields, 413 past 4 KiB;
#   register, heartbeat, register again, leave of a hand-made worker; GET
#   the ledger; then SIGINT: exit 0 before step 1, saying why;
# - a worker (`rlpost serve --join`, its own mirror of a `rlpost
#   weights-serve` origin) joins and the pull run of 3 steps trains on it:
#   16 valid samples a step; its worker id is in its mirror's
#   .rlpost-worker-id and in the summary's swarm ledger with 1 join and the
#   requests it served;
# - the trainer restarts (--resume, 2 more steps, the same coordinator
#   port): the worker's heartbeats fail meanwhile (retried with backoff),
#   the new coordinator answers 404, the worker registers again and the
#   resumed steps run on it.
# Skips (77) without the shared data or python3.
set -u
rlpost=$1
data=${RLPOST_SHARED_DATA:-}/llama2c/stories260K.bin
[ -n "${RLPOST_SHARED_DATA:-}" ] && [ -f "$data" ] || { echo "no stories260K.bin: skipped"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
"$rlpost" serve 2>&1 | grep -q 'without libmicrohttpd' && { echo "no libmicrohttpd: skipped"; exit 77; }
out=$(mktemp -d)
pids=""
trap 'for p in $pids; do kill -9 $p 2>/dev/null; done; rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; for f in "$out"/*.log; do echo "--- $f"; tail -5 "$f"; done; exit 1; }

python3 "$(dirname "$0")/train_fixture.py" "$out" >/dev/null || exit 1
model="$out/model.bin"
cp "$data" "$model"
cfg="$out/config.json"
printf 'join-token-26\n' >"$out/token"
chmod 600 "$out/token"
mkdir -p "$out/weights" "$out/m0"
unset RLPOST_SERVE_TOKEN
T() { "$rlpost" train "$cfg" --set "model=\"$model\"" --set "sync.weights_dir=\"$out/weights\"" "$@"; }

# refuse KEY_PATTERN ARGS...: exit 2, one line naming the key, nothing written
refuse() {
  _want=$1
  shift
  T --set "output=\"$out/bad\"" "$@" >/dev/null 2>"$out/err"
  _rc=$?
  [ $_rc -eq 2 ] && [ "$(wc -l <"$out/err")" -eq 1 ] && grep -q "$_want" "$out/err" ||
    { cat "$out/err"; fail "expected exit 2 naming $_want, got $_rc ($*)"; }
  [ ! -e "$out/bad" ] || fail "a refused configuration wrote $out/bad"
}
refuse "swarm.listen: the coordinator needs a bearer token" --set 'sync.mode="pull"' --set 'swarm.listen="127.0.0.1:0"'
refuse 'swarm.listen: "localhost" is not HOST:PORT' --set 'sync.mode="pull"' --set 'swarm.listen="localhost"' \
  --set "swarm.token_file=\"$out/token\""
refuse 'swarm.listen: needs sync.mode' --set 'swarm.listen="127.0.0.1:0"' --set "swarm.token_file=\"$out/token\""
refuse 'swarm.suspect_s: must be more than swarm.heartbeat_s' --set swarm.heartbeat_s=5 --set swarm.suspect_s=4
refuse 'swarm.min_workers: needs swarm.listen' --set swarm.min_workers=1
refuse 'swarm.token_file: .*nope' --set 'sync.mode="pull"' --set 'swarm.listen="127.0.0.1:0"' \
  --set "swarm.token_file=\"$out/nope\""
for args in "--join http://127.0.0.1:1" "--join http://127.0.0.1:1 --weights-dir $out/m0" \
  "--advertise http://127.0.0.1:1 --token-file $out/token --weights-dir $out/m0"; do
  # shellcheck disable=SC2086
  "$rlpost" serve "$model" --port 0 $args >/dev/null 2>"$out/err"
  rc=$?
  [ $rc -eq 2 ] && grep -q -- '--join\|--advertise' "$out/err" || { cat "$out/err"; fail "serve $args: exit $rc"; }
done

# wait_log FILE PATTERN: until FILE has a line matching PATTERN (30 s at most;
# what follows fails with its own message if it never came)
wait_log() {
  _j=0
  while ! grep -q -- "$2" "$1" 2>/dev/null && [ $_j -lt 600 ]; do
    sleep 0.05
    _j=$((_j + 1))
  done
}

# the origin the worker mirrors, and the trainer (pull, 3 steps) waiting for 1 worker
"$rlpost" weights-serve "$out/weights" --port 0 --token-file "$out/token" >"$out/origin.out" 2>"$out/origin.log" &
pids="$pids $!"
wait_log "$out/origin.out" listening
origin=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["listening"])' \
  "$out/origin.out") || fail "the origin did not start"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# RUN FILE STEPS [ARGS...]: the pull run on the coordinator port $port, waiting for 1 worker
RUN() {
  _f=$1 _n=$2
  shift 2
  T --set "output=\"$out/run\"" --set 'sync.mode="pull"' --set steps="$_n" --set eval.n=0 \
    --set checkpoint.interval=0 --set "swarm.listen=\"127.0.0.1:$port\"" --set "swarm.token_file=\"$out/token\"" \
    --set swarm.min_workers=1 --set swarm.join_timeout_s=60 --set swarm.heartbeat_s=0.5 --set swarm.suspect_s=3 \
    "$@" >"$out/$_f.json" 2>"$out/$_f.log"
}
# the routes, on a trainer that waits for 64 workers (the hand-made one below must not start it),
# then is interrupted: exit 0 before step 1
# (the command itself in the background, not a function: $! is then its pid)
"$rlpost" train "$cfg" --set "model=\"$model\"" --set "sync.weights_dir=\"$out/weights\"" \
  --set "output=\"$out/routes\"" --set 'sync.mode="pull"' --set 'swarm.listen="127.0.0.1:0"' \
  --set "swarm.token_file=\"$out/token\"" --set swarm.min_workers=64 --set swarm.heartbeat_s=0.5 \
  >"$out/routes.json" 2>"$out/routes.log" &
routes_pid=$!
pids="$pids $routes_pid"
wait_log "$out/routes.log" "swarm: waiting for 64 workers"
rcoord=$(sed -n 's/^swarm: coordinator on \(http[^ ]*\) .*/\1/p' "$out/routes.log")
[ -n "$rcoord" ] || fail "no coordinator line in the trainer's log"
python3 - "$rcoord" "$origin" <<'PY' || fail "the coordinator's routes"
import json, sys, urllib.error, urllib.request
base, alive = sys.argv[1], sys.argv[2]  # alive: a server that answers /health (the origin)
def call(path, body=None, token="join-token-26", method=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(base + path, data=data, method=method or ("POST" if data is not None else "GET"))
    if token:
        req.add_header("Authorization", "Bearer " + token)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
wid = "0123456789abcdef0123456789abcdef"
assert call("/v1/rlpost/workers", token=None)[0] == 401
assert call("/v1/rlpost/workers", token="wrong")[0] == 401
assert call("/v1/rlpost/nothing")[0] == 404
assert call("/v1/rlpost/register", method="GET")[0] == 405
assert call("/v1/rlpost/workers", body={})[0] == 405
code, ans = call("/v1/rlpost/heartbeat", {"worker_id": wid})
assert code == 404 and "register again" in ans["error"]["message"], (code, ans)
assert call("/v1/rlpost/register", raw=b"not json")[0] == 400
assert call("/v1/rlpost/register", {"worker_id": "bad id!", "url": "http://127.0.0.1:9"})[0] == 400
assert call("/v1/rlpost/register", {"worker_id": wid, "url": "ftp://x"})[0] == 400
assert call("/v1/rlpost/register", {"worker_id": wid, "url": "http://127.0.0.1:9", "weight_version": -1})[0] == 400
assert call("/v1/rlpost/register", raw=json.dumps({"worker_id": wid, "pad": "x" * 5000}).encode())[0] == 413
try:  # declared far past the limit: refused before the body is read (the server may close while we send)
    assert call("/v1/rlpost/register", raw=b"x" * (2 << 20))[0] == 413
except (ConnectionError, urllib.error.URLError):
    pass
# refused: a URL the trainer cannot reach (it would count toward min_workers
# and fail every request), weights newer than the trainer's (another run's)
code, ans = call("/v1/rlpost/register", {"worker_id": wid, "url": "http://127.0.0.1:9", "weight_version": 0})
assert code == 400 and "cannot reach" in ans["error"]["message"], (code, ans)
code, ans = call("/v1/rlpost/register", {"worker_id": wid, "url": alive, "weight_version": 7})
assert code == 409 and "another run" in ans["error"]["message"], (code, ans)
# a hand-made worker at a URL that answers /health (the origin: it never becomes one the run needs)
code, ans = call("/v1/rlpost/register", {"worker_id": wid, "url": alive, "weight_version": 0})
assert code == 200 and ans["heartbeat_s"] == 0.5 and ans["version"] == 0 and ans["joins"] == 1, ans
code, ans = call("/v1/rlpost/heartbeat", {"worker_id": wid, "weight_version": 0})
assert code == 200 and ans["state"] == "alive", ans
# registered again while alive (a fast restart): 2 joins, alive; out of the set and back in
code, ans = call("/v1/rlpost/register", {"worker_id": wid, "url": alive, "weight_version": 0})
assert code == 200 and ans["joins"] == 2, ans
code, led = call("/v1/rlpost/workers")
assert code == 200 and [(w["id"], w["state"], w["joins"]) for w in led["workers"]] == [(wid, "alive", 2)], led
assert led["live"] == 1 and led["dispatch_updates"] == 3, led
assert call("/v1/rlpost/leave", {"worker_id": wid})[0] == 200
assert call("/v1/rlpost/heartbeat", {"worker_id": wid})[0] == 404  # left: it must register again
code, led = call("/v1/rlpost/workers")
assert led["live"] == 0 and led["workers"][0]["state"] == "left", led
PY
kill -INT "$routes_pid"
wait "$routes_pid" || fail "the interrupted trainer exited $?"
grep -q "swarm.min_workers: 0 of 64 workers joined before the interrupt" "$out/routes.log" ||
  fail "the interrupted trainer did not say why it stopped"
[ ! -e "$out/routes/metrics.jsonl" ] || [ ! -s "$out/routes/metrics.jsonl" ] || fail "the interrupted trainer trained"

# the run (pull, 3 steps) waiting for 1 worker, which joins
RUN run 3 &
train_pid=$!
pids="$pids $train_pid"
wait_log "$out/run.log" "swarm: waiting for 1 worker"
coord=$(sed -n 's/^swarm: coordinator on \(http[^ ]*\) .*/\1/p' "$out/run.log")
[ "$coord" = "http://127.0.0.1:$port" ] || fail "no coordinator line in the trainer's log ($coord)"

"$rlpost" serve "$model" --port 0 --threads 1 --token-file "$out/token" --weights-dir "$out/m0" \
  --weights-from "$origin" --weights-poll-s 0.2 --join "$coord" >"$out/w0.out" 2>"$out/w0.log" &
wpid=$!
pids="$pids $wpid"
wait "$train_pid" || { cat "$out/run.log"; fail "rlpost train with a worker that joined"; }
# the trainer restarts (--resume, 2 more steps) on the same port: the worker, retrying its
# heartbeats meanwhile, is told 404 by the new coordinator and registers again
sleep 1.5 # down for 3 heartbeat periods
RUN resumed 5 --resume "$out/run" || { cat "$out/resumed.log"; fail "the resumed run"; }
kill -TERM "$wpid"
wait "$wpid" 2>/dev/null
grep -q "heartbeat to $coord: .*retrying every" "$out/w0.log" || fail "the worker did not retry while the trainer was down"
grep -q "the trainer does not know this worker (HTTP 404: .*): registering again" "$out/w0.log" ||
  fail "the worker did not register again after a 404"
[ "$(grep -c "rlpost serve: joined the swarm at $coord as " "$out/w0.log")" -eq 2 ] || fail "the worker did not join twice"
python3 - "$out" <<'PY' || fail "the run and its ledger"
import json, sys
d = sys.argv[1]
m = [json.loads(l) for l in open(d + "/run/metrics.jsonl")]  # the first run's 3 steps, the resumed run's 2
assert [r["step"] for r in m] == [1, 2, 3, 4, 5], [r["step"] for r in m]
for r in m:
    assert r["n_seqs"] == 16 and r["invalid_seqs"] == 0 and r["reward_valid"] == 16 and r["staleness_max"] == 0, r
s = json.load(open(d + "/run.json"))["swarm"]  # the first run's
wid = open(d + "/m0/.rlpost-worker-id").read().strip()
assert len(wid) == 32 and int(wid, 16) >= 0, wid
w = {x["id"]: x for x in s["workers"]}
assert set(w) == {wid}, s
assert w[wid]["state"] == "alive" and w[wid]["joins"] == 1 and w[wid]["requests_ok"] == 12, w[wid]
assert w[wid]["requests_failed"] == 0 and w[wid]["heartbeats"] >= 0, w[wid]
assert w[wid]["completions"] == 48 and w[wid]["last_weight_version"] == 2 and w[wid]["staleness_max"] == 0, w[wid]
assert s["requests"] == {"register": 1, "heartbeat": s["requests"]["heartbeat"], "leave": 0, "refused": 0}, s
assert s["live"] == 1 and s["dispatch_update_errors"] == 0 and s["static"] == [], s
# the resumed run: steps 4 and 5 on the same worker, a ledger of its own (one join), version 5 at its end
r = json.load(open(d + "/resumed.json"))
assert r["resumed_from"] == 3 and r["steps_completed"] == 5, r
s = r["swarm"]
assert [(x["id"], x["joins"], x["state"], x["requests_ok"]) for x in s["workers"]] == [(wid, 1, "alive", 8)], s
assert s["version"] == 5 and s["workers"][0]["last_weight_version"] == 4, s
PY
echo "ok"
