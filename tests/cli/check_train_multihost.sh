#!/bin/sh
# `rlpost train` with its data-parallel ranks on different hosts: network
# namespaces joined by veth links through the userspace WAN switch
# (netns_hosts.sh hosts_make_wan, tests/net/wan_switch.c), each rank in its
# own, all addresses inside the namespaces (stories260K,
# train_fixture.py's config: 4 prompts x 4 samples, 1 thread).
# - env:// (MASTER_ADDR = host 0, MASTER_PORT) over the Gloo transport, 2
#   ranks on 2 hosts: every step's metrics and the final weights equal the
#   SHM run of 2 ranks on one host bit for bit;
# - the same over WAN links: 25 ms each way (±5 ms), 0.5 % frame loss,
#   50 Mbit/s;
# - 4 ranks on 4 hosts: the same against the 4-rank SHM run (the Gloo and
#   MPI modules sum in rank order, as SHM does, so the bits agree);
# - mpirun across the hosts (OpenMPI, its remote launch through
#   `ip netns exec`), 2 and 4 ranks: equal to the SHM runs bit for bit (the
#   MPI module sums in rank order, as SHM does; if the module was built);
# - a rank that never comes: rank 0 fails within the timeout naming it;
#   MASTER_ADDR unset: a clear error.
# Skips (77) without root/namespaces, the shared data, python3, or the
# Gloo module. Usage: check_train_multihost.sh RLPOST WAN_SWITCH
set -u
rlpost=$1
wan=$2
. "$(dirname "$0")/train_setup.sh"
. "$(dirname "$0")/netns_hosts.sh"
# the modules sit next to the librlpost the driver loads
libdir=$(ldd "$rlpost" | sed -n 's|.*librlpost\.so[^ ]* => \(.*\)/librlpost\.so.*|\1|p')
[ -f "$libdir/librlpost-gloo.so" ] || { echo "no librlpost-gloo.so (libgloo-dev missing at build time): skipped"; exit 77; }
hosts_make_wan 4 "$wan"
port=29500
master=$(host_ip 0)

# reference runs on one host over shared memory
for w in 2 4; do
  T --set "output=\"$out/shm$w\"" --set distributed.world_size=$w --set steps=2 --set prompts_per_step=4 \
    >/dev/null 2>"$out/shm$w.err" || { cat "$out/shm$w.err"; fail "SHM $w ranks"; }
done

# ranks by hand, torchrun-style: rank r on host r; $1 = world, $2 = name, rest = extra --set
ranks_env() {
  w=$1 name=$2
  shift 2
  port=$((port + 1))
  r=0
  while [ $r -lt "$w" ]; do
    host_run $r env RLPOST_RANK=$r RLPOST_WORLD_SIZE="$w" RLPOST_RENDEZVOUS=env:// MASTER_ADDR="$master" \
      MASTER_PORT=$port "$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"$out/$name\"" \
      --set steps=2 --set prompts_per_step=4 --set distributed.timeout_s=60 "$@" \
      >"$out/$name$r.json" 2>"$out/$name$r.err" &
    eval "pid$r=\$!"
    r=$((r + 1))
  done
  r=0
  while [ $r -lt "$w" ]; do
    eval "wait \$pid$r" || { cat "$out/$name$r.err"; fail "$name: rank $r"; }
    r=$((r + 1))
  done
}

ranks_env 2 gloo2
cmp -s "$out/shm2/checkpoints/step_2/model.safetensors" "$out/gloo2/checkpoints/step_2/model.safetensors" ||
  fail "2 ranks on 2 hosts over Gloo ended with other weights than 2 ranks over SHM"

# WAN links: delay, jitter, loss and a rate cap on every crossing
hosts_wan_profile --delay-ms 25 --jitter-ms 5 --loss 0.5 --rate-mbit 50 --stats "$out/wan.json"
ranks_env 2 slow2
hosts_wan_profile
python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print("WAN profile:", json.dumps(s)[:300])' \
  "$out/wan.json" 2>/dev/null || true
cmp -s "$out/shm2/checkpoints/step_2/model.safetensors" "$out/slow2/checkpoints/step_2/model.safetensors" ||
  fail "2 ranks over shaped links ended with other weights"

ranks_env 4 gloo4
cmp -s "$out/shm4/checkpoints/step_2/model.safetensors" "$out/gloo4/checkpoints/step_2/model.safetensors" ||
  fail "4 ranks on 4 hosts over Gloo ended with other weights than 4 ranks over SHM"

# mpirun across the hosts: its remote starts go through `ip netns exec`
if [ -f "$libdir/librlpost-mpi.so" ] && command -v mpirun >/dev/null 2>&1; then
  agent="$out/netns-rsh"
  {
    echo '#!/bin/sh'
    echo '# mpirun'"'"'s remote shell: "agent HOST CMD..." runs CMD in the namespace of HOST,'
    echo '# under a hostname of its own (OpenMPI names its session folders by host: daemons of'
    echo '# "hosts" sharing one name and one /tmp race to create the same folder)'
    echo 'h=$1; shift'
    i=0
    while [ $i -lt 4 ]; do
      echo "[ \"\$h\" = $(host_ip $i) ] && exec ip netns exec $(host_ns $i) unshare --uts sh -c \"hostname h$i && \$*\""
      i=$((i + 1))
    done
    echo 'echo "netns-rsh: unknown host $h" >&2; exit 1'
  } >"$agent"
  chmod +x "$agent"
  for w in 2 4; do
    i=0
    : >"$out/hostfile$w"
    while [ $i -lt $w ]; do echo "$(host_ip $i) slots=1" >>"$out/hostfile$w"; i=$((i + 1)); done
    # routed direct: every remote orted reports to mpirun itself (the default
    # routing tree fails to wire up 4 hosts started through the agent)
    host_run 0 unshare --uts sh -c 'hostname h0 && exec "$@"' sh env LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")/.." && pwd)/lsan_openmpi.supp:fast_unwind_on_malloc=0" \
      mpirun --allow-run-as-root --mca orte_tmpdir_base "$out" -n $w --hostfile "$out/hostfile$w" --mca plm_rsh_agent "$agent" \
      --mca routed direct --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include "10.$net.0.0/24" \
      --mca oob_tcp_if_include "10.$net.0.0/24" --mca osc ^ucx -x PATH -x LSAN_OPTIONS -x ASAN_OPTIONS \
      -x UBSAN_OPTIONS \
      "$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"$out/mpi$w\"" --set steps=2 \
      --set prompts_per_step=4 --set distributed.timeout_s=60 >"$out/mpi$w.json" 2>"$out/mpi$w.err" ||
      { cat "$out/mpi$w.err"; fail "mpirun -n $w across $w hosts"; }
    cmp -s "$out/shm$w/checkpoints/step_2/model.safetensors" "$out/mpi$w/checkpoints/step_2/model.safetensors" ||
      fail "$w ranks under mpirun ended with other weights than $w ranks over SHM"
  done
  mpi=1
else
  echo "note: no librlpost-mpi.so or mpirun: the MPI case is not run"
  mpi=0
fi

python3 - "$out" "$mpi" <<'PY' || fail "multi-host metrics"
import json, sys
d, mpi = sys.argv[1], sys.argv[2] == "1"
load = lambda p: [json.loads(l) for l in open(d + p)]
loose = {"rollout_seconds", "reward_seconds", "train_seconds", "publish_seconds", "step_seconds", "tokens_per_second",
         "elapsed_seconds", "trainer_idle_seconds", "rollout_idle_seconds", "buffer_size"}
def same(x, y, what, rel=0.0):
    assert len(x) == len(y) == 2, (what, len(x), len(y))
    for p, q in zip(x, y):
        for k in p:
            if k in loose:
                continue
            a, b = p[k], q[k]
            if rel and isinstance(a, float) and isinstance(b, float):
                assert abs(a - b) <= rel * max(abs(a), abs(b), 1e-6), (what, p["step"], k, a, b)
            else:
                assert a == b, (what, p["step"], k, a, b)
shm2, shm4 = load("/shm2/metrics.jsonl"), load("/shm4/metrics.jsonl")
same(shm2, load("/gloo2/metrics.jsonl"), "gloo, 2 hosts")
same(shm2, load("/slow2/metrics.jsonl"), "gloo, 2 shaped hosts")
same(shm4, load("/gloo4/metrics.jsonl"), "gloo, 4 hosts")
if mpi:
    for w, ref in ((2, shm2), (4, shm4)):
        same(ref, load("/mpi%d/metrics.jsonl" % w), "mpirun, %d hosts" % w)
        s = json.load(open(d + "/mpi%d.json" % w))
        assert s["world_size"] == w and s["transport"] == "mpi", s
for name, w in (("gloo2", 2), ("slow2", 2), ("gloo4", 4)):
    s = json.load(open(d + "/" + name + "0.json"))
    assert s["world_size"] == w and s["transport"] == "gloo", (name, s)
for r in shm2 + shm4:
    assert r["grad_norm"] > 0, r  # the runs move the weights: equal checkpoints mean equal all-reduces
for r in load("/gloo4/metrics.jsonl"):
    assert r["completions"] == 16 and r["n_groups"] == 4, r
print("multi-host metrics agree")
PY

# a rank that never comes: rank 0 alone, 3 s timeout
port=$((port + 1))
host_run 0 env RLPOST_RANK=0 RLPOST_WORLD_SIZE=2 RLPOST_RENDEZVOUS=env:// MASTER_ADDR="$master" MASTER_PORT=$port \
  "$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"$out/alone\"" --set distributed.timeout_s=3 \
  >/dev/null 2>"$out/alone.err" && fail "rank 0 without rank 1 exited 0"
grep -q "rank 1 did not arrive" "$out/alone.err" || { cat "$out/alone.err"; fail "no message naming the missing rank"; }
# env:// without MASTER_ADDR
host_run 1 env -u MASTER_ADDR RLPOST_RANK=1 RLPOST_WORLD_SIZE=2 RLPOST_RENDEZVOUS=env:// MASTER_PORT=$port \
  "$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"$out/nomaster\"" >/dev/null 2>"$out/nm.err" &&
  fail "env:// without MASTER_ADDR exited 0"
grep -q "MASTER_ADDR" "$out/nm.err" || { cat "$out/nm.err"; fail "no message naming MASTER_ADDR"; }
echo "ok"
