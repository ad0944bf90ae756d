# Shell functions the swarm tests share (check_swarm_wan.sh,
# check_swarm_join.sh); sourced after tests/cli/netns_hosts.sh. They read
# the caller's $out, $d (the run's folder), $data, $here, $train_pid and fail().

# wait_listening FILE NAME: the server printed {"listening": ...} (60 s at most)
wait_listening() {
  _j=0
  while ! grep -q listening "$1" 2>/dev/null; do
    _j=$((_j + 1))
    [ $_j -lt 600 ] || fail "$2 did not start"
    sleep 0.1
  done
}
# steps_done: lines of $d/run/metrics.jsonl (0 before the first step)
steps_done() { [ -f "$d/run/metrics.jsonl" ] && wc -l <"$d/run/metrics.jsonl" || echo 0; }
# wait_steps N: until N steps are done or the trainer ($train_pid) ended
wait_steps() {
  while [ "$(steps_done)" -lt "$1" ] && kill -0 "$train_pid" 2>/dev/null; do sleep 0.1; done
}
# health K: worker wK's weight_version (host K+1, port 8000; asked from host 0)
health() {
  host_run 0 curl -s -m 5 "http://$(host_ip $(($1 + 1))):8000/health" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["weight_version"])' 2>/dev/null
}
# the processes a test started in the background (the namespaces' own are
# killed by hosts_delete too)
hosts_cleanup_extra() { for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done; }
# swarm_fixture TOKEN: train_fixture.py's config in $out, $data (stories260K)
# copied to $out/model.bin, TOKEN in $out/token (mode 600); sets model,
# cfg and TOKEN
swarm_fixture() {
  python3 "$here/../cli/train_fixture.py" "$out" >/dev/null || exit 1
  model="$out/model.bin"
  cp "$data" "$model"
  cfg="$out/config.json"
  TOKEN=$1
  printf '%s\n' "$TOKEN" >"$out/token"
  chmod 600 "$out/token"
}
