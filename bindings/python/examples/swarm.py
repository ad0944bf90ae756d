#!/usr/bin/env python3
"""An asynchronous push-pull run (Echo / AReaL) driven from Python.

    swarm.py MODEL [--tokenizer PATH] [--workers N] [--rlpost PATH | --local] [--steps S]
             [--eta η] [--group G] [--prompts B] [--max-new-tokens T] [--threads t] [--dir DIR]

Rollout side and trainer run at the same time, joined by a replay buffer
(groups older than v − η are dropped) and a synchronizer (RLP_SYNC_ASYNC:
the trainer publishes every version, rollout workers pull when ready and
admit groups through the staleness gate).

- Default: N `rlpost serve MODEL --port 0 --weights-dir DIR` worker
  processes on loopback (the driver: --rlpost PATH, RLPOST_DRIVER, or
  build/examples/rlpost/rlpost of the source tree), one remote rollout
  engine over all their URLs, the HTTP weight transport (publish writes
  DIR/v<version>/, pull POSTs /update_weights_from_disk to the workers).
- --local: N rollout threads in this process, each with its own local
  engine (a copy of the weights), and the in-process transport.

The producers are rlpost.RolloutWorker threads (the library's producer
half, rlp_rollout_worker), one per engine, each drawing K&K prompts from a
task of its own (rendered and encoded with the model's tokenizer, or with
--tokenizer for a model without one such as stories260K.bin). Per batch of
ceil(B / N) groups a worker admits them through the gate → pulls the
latest weights → generates G samples per prompt → scores them with a
reward written in Python (the share of even token ids in the completion:
cheap and learnable; the library calls it on its reward worker threads) →
pushes the groups whole. The trainer loop (this thread): pull B groups at
version v → one GRPO step → publish v + 1. ctypes releases the GIL in
every library call, so generation, scoring and training overlap.

stdout: a JSON line per step, then a summary line with the bookkeeping
checks (every pushed group was consumed, dropped as stale or is still
held; none consumed twice; every worker stopped healthy). Exit 0 when they
hold, 1 otherwise, 2 on bad arguments, 77 when the model is missing.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


from _host import import_rlpost  # noqa: E402  (beside this file)

rlpost = import_rlpost()


def log(msg):
    print("swarm: " + msg, file=sys.stderr, flush=True)


# ---- worker processes ------------------------------------------------------------

class Worker:
    def __init__(self, driver, model, folder, index, threads):
        self.log_path = os.path.join(folder, "worker%d.log" % index)
        cmd = [driver, "serve", model, "--port", "0", "--weights-dir", folder, "--threads", str(threads),
               "--max-batch", "32", "--max-seq-len", "512"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(self.log_path, "ab"), text=True)
        line = self.proc.stdout.readline()  # {"listening": URL, ..., "weight_version": V}
        try:
            info = json.loads(line)
            self.url = info["listening"]
        except (ValueError, KeyError):
            self.stop()
            raise RuntimeError("worker %d gave no listening line (see %s): %r" % (index, self.log_path, line))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def find_driver(given):
    for path in (given, os.environ.get("RLPOST_DRIVER"), os.path.join(ROOT, "build", "examples", "rlpost", "rlpost"),
                 shutil.which("rlpost")):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


# ---- the rollout side --------------------------------------------------------------

def even_share(req):
    """The reward, in Python: the share of even token ids in the completion."""
    toks = req.completion_tokens
    return sum(1 for t in toks if t % 2 == 0) / len(toks) if len(toks) else 0.0


# ---- main: the trainer ---------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--tokenizer", help="tokenizer file for a model without one (e.g. stories260K.bin)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rlpost", help="the rlpost driver for the worker processes")
    ap.add_argument("--local", action="store_true", help="rollout threads with local engines instead of processes")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--eta", type=int, default=1, help="maximum staleness η")
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=4, help="groups per train step (B)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dir", help="folder of the published weights (default: a temporary one)")
    args = ap.parse_args()
    if not (1 <= args.workers <= 16 and args.steps >= 1 and args.eta >= 0 and args.group >= 2 and args.prompts >= 1
            and 1 <= args.max_new_tokens <= 200):
        ap.error("bad numbers")
    try:
        rlpost.model_inspect(args.model)
    except rlpost.Error as e:
        log("%s (skipped)" % e)
        return 77
    driver = None
    if not args.local:
        driver = find_driver(args.rlpost)
        if driver is None:
            ap.error("no rlpost driver: give --rlpost PATH or use --local")
    folder = args.dir or tempfile.mkdtemp(prefix="rlpost-pyswarm-")
    os.makedirs(folder, exist_ok=True)
    processes, engines, rollout = [], [], []
    ctx = rlpost.Context(n_threads=args.threads)
    policy = rlpost.Policy(ctx, args.model)
    policy.set_optimizer(lr=1e-3)
    tok = rlpost.Tokenizer(args.tokenizer) if args.tokenizer else policy.tokenizer
    if tok is None:
        ap.error("%s has no tokenizer of its own: give --tokenizer" % args.model)
    try:
        if args.local:
            sync = rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, transport=rlpost.SyncTransport.IN_PROCESS,
                                       max_staleness=args.eta, batch_groups=args.prompts)
            engines = [rlpost.RolloutEngine(policy, max_batch=args.prompts * args.group, max_seq_len=512)
                       for _ in range(args.workers)]
        else:
            processes = [Worker(driver, args.model, folder, i, args.threads) for i in range(args.workers)]
            urls = [w.url for w in processes]
            log("%d workers at %s" % (len(urls), ", ".join(urls)))
            sync = rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, transport=rlpost.SyncTransport.HTTP,
                                       max_staleness=args.eta, batch_groups=args.prompts, dir=folder, urls=urls,
                                       timeout_ms=60000, max_retries=2)
            # the model's own tokenizer (None for stories260K: the workers then encode the
            # prompts and decode the completions with --tokenizer's, as for local engines)
            engines = [rlpost.RolloutEngine.remote(urls, tokenizer=policy.tokenizer, timeout_ms=120000,
                                                   max_retries=3)]
        buf = rlpost.ReplayBuffer(sync=sync)  # one η: the gate's
        reward = rlpost.RewardFn(even_share, name="even_share", n_threads=2)
        sync.publish(policy)  # version 0: where every worker starts
        # each rollout thread admits ceil(B / N) groups per batch: N workers holding part of
        # their slots each can never fill the gate's (η + 1)·B between them and wait forever
        per_batch = -(-args.prompts // len(engines))
        warnings = []
        for i, e in enumerate(engines):
            task = rlpost.Task("kk", {"seed": 1 + i, "people": 2, "template": "none"})  # one task per thread
            rollout.append(rlpost.RolloutWorker(e, task, reward, sync, buf, prompts_per_batch=per_batch, seed=7 + i,
                                                tokenizer=tok, sampling={"n": args.group,
                                                                         "max_new_tokens": args.max_new_tokens,
                                                                         "ignore_eos": True},
                                                log=lambda level, msg: warnings.append(msg) or log(msg)))
        for w in rollout:
            w.start()

        seen = {}
        t0, train_s, trained, failed = time.monotonic(), 0.0, 0, False
        for step in range(args.steps):
            try:
                b = buf.pull(args.prompts, policy.version, timeout_ms=300000)
            except rlpost.Error as e:
                log("step %d: no batch: %s%s" % (step, e, "".join("; " + w.error for w in rollout if w.error)))
                failed = True
                break
            for t in b:
                if t.sample_index == 0:
                    seen[t.group_id] = seen.get(t.group_id, 0) + 1
            a = time.monotonic()
            st = policy.train_rl(b)
            sync.publish(policy)
            train_s += time.monotonic() - a
            trained += st.n_seqs
            bs = buf.stats()
            print(json.dumps({"step": step, "version": st.policy_version, "groups": st.n_groups,
                              "trajectories": st.n_seqs, "reward_mean": st.reward_mean,
                              "staleness_mean": st.staleness_mean, "staleness_max": st.staleness_max,
                              "loss": st.loss, "accepted": bs.accepted, "consumed": bs.consumed,
                              "dropped_stale": bs.dropped_stale, "held": bs.size,
                              "seconds": round(time.monotonic() - t0, 3)}), flush=True)
            b.close()
        wall = time.monotonic() - t0
        # stop the rollout side: the gate and the buffer close, a generation in flight is
        # aborted and its slots are released unaccepted; nothing half-done is pushed
        for w in rollout:
            w.stop()
        ws = [w.stats() for w in rollout]
        errors = [w.error for w in rollout if w.error]
        bs, ss = buf.stats(), sync.stats()
        pushed = sum(s.groups_pushed for s in ws)
        duplicates = sum(c - 1 for c in seen.values())
        books = (pushed == bs.accepted == bs.consumed + bs.dropped_stale + bs.size
                 and len(seen) == bs.consumed and duplicates == 0)
        ok = not failed and books and not errors and not any(s.running for s in ws)
        print(json.dumps({"summary": True, "ok": ok, "mode": "local" if args.local else "processes",
                          "steps": args.steps, "workers": args.workers, "rollout_threads": len(rollout),
                          "eta": args.eta, "seconds": round(wall, 3), "trained_trajectories": trained,
                          "trajectories_per_s": trained / wall if wall > 0 else 0.0,
                          "pushed_trajectories": pushed * args.group,
                          "trainer_busy_fraction": train_s / wall if wall > 0 else 0.0,
                          "pushed_groups": pushed, "accepted": bs.accepted, "consumed": bs.consumed,
                          "dropped_stale": bs.dropped_stale, "held": bs.size, "consumed_distinct_ids": len(seen),
                          "duplicates": duplicates, "released_unpushed": sum(s.groups_released for s in ws),
                          "rollout_idle_seconds": sum(s.idle_seconds for s in ws), "warnings": len(warnings),
                          "publishes": ss.publishes, "weight_loads": ss.weight_loads}), flush=True)
        for msg in errors:
            log("a rollout thread failed: %s" % msg)
        if not ok:
            log("FAILED: the run stopped early or the group bookkeeping does not add up")
        for w in rollout:
            w.close()
        reward.close()
        buf.close()
        for e in engines:
            e.close()
        sync.close()
        return 0 if ok else 1
    finally:
        for w in rollout:
            w.close()  # before the engines and processes they use (safe twice)
        for w in processes:
            w.stop()
        policy.close()
        ctx.close()
        if args.tokenizer:
            tok.close()
        if not args.dir:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
