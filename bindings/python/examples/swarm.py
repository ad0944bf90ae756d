#!/usr/bin/env python3
"""An asynchronous push-pull run (Echo / AReaL) driven from Python.

    swarm.py MODEL [--workers N] [--rlpost PATH | --local] [--steps S] [--eta η]
             [--group G] [--prompts B] [--max-new-tokens T] [--threads t] [--dir DIR]

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

Each rollout thread loops: acquire up to B groups through the gate → pull
the latest weights → generate G samples of B random token prompts → score
them with a reward written in Python (the share of even token ids: cheap
and learnable; the library calls it on its reward worker threads) → push
the groups whose requests all succeeded → release the gate slots. The
trainer loop (this thread): pull B groups at version v → one GRPO step →
publish v + 1. ctypes releases the GIL in every library call, so
generation, scoring and training overlap.

stdout: a JSON line per step, then a summary line with the bookkeeping
checks (every pushed group was consumed, dropped as stale or is still
held; none consumed twice). Exit 0 when they hold, 1 otherwise, 2 on bad
arguments, 77 when the model is missing.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PROMPT_LEN = 8


from _host import import_rlpost  # noqa: E402  (beside this file)

rlpost = import_rlpost()


def log(msg):
    print("swarm: " + msg, file=sys.stderr, flush=True)


# ---- worker processes ------------------------------------------------------------

class Worker:
    def __init__(self, driver, model, folder, index, threads):
        self.log_path = os.path.join(folder, "worker%d.log" % index)
        cmd = [driver, "serve", model, "--port", "0", "--weights-dir", folder, "--threads", str(threads),
               "--max-batch", "32", "--max-seq-len", "256"]
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

class Shared:
    def __init__(self, sync, buf, reward, vocab, args):
        self.sync, self.buf, self.reward, self.vocab, self.args = sync, buf, reward, vocab, args
        self.lock = threading.Lock()
        self.next_group = 1
        self.pushed = self.error_groups = self.unpushed = self.pull_failures = self.generated = 0
        self.failure = None


def even_share(req):
    """The reward, in Python: the share of even token ids in the completion."""
    toks = req.completion_tokens
    return sum(1 for t in toks if t % 2 == 0) / len(toks) if len(toks) else 0.0


def rollout_loop(sh, engine):
    B, G = sh.args.prompts, sh.args.group
    try:
        while True:
            try:
                sh.sync.acquire()  # one slot, waiting as long as the gate says
            except rlpost.ClosedError:
                return
            k = 1
            while k < B:
                try:
                    sh.sync.acquire(timeout_ms=0)
                    k += 1
                except (rlpost.AgainError, rlpost.ClosedError):
                    break
            try:
                sh.sync.pull(engine)
            except rlpost.Error as e:  # a dead worker: the others were updated, the next pull retries
                log("pull: %s" % e)
                with sh.lock:
                    sh.pull_failures += 1
            with sh.lock:
                g0 = sh.next_group
                sh.next_group += k
            prompts = [{"tokens": [random.Random(g0 + i).randrange(sh.vocab) for _ in range(PROMPT_LEN)],
                        "group_id": g0 + i} for i in range(k)]
            batch = engine.generate(prompts, n=G, max_new_tokens=sh.args.max_new_tokens, ignore_eos=True, seed=7)
            bad = {t.group_id for t in batch if t.finish_reason == rlpost.FinishReason.ERROR or not t.valid}
            sh.reward.score(batch)
            good = rlpost.Batch()
            for t in batch:
                if t.group_id not in bad:
                    good.append(t)
            n_good = k - len(bad)
            accepted = True
            try:
                if n_good:
                    sh.buf.push(good)
            except rlpost.ClosedError:
                accepted = False  # the run is over
            for i in range(k):
                sh.sync.release(accepted=accepted and (g0 + i) not in bad)
            with sh.lock:
                sh.generated += len(batch)
                sh.error_groups += len(bad)
                if accepted:
                    sh.pushed += n_good
                else:
                    sh.unpushed += n_good
            batch.close()
            good.close()
            if not accepted:
                return
    except BaseException as e:  # anything else ends the run as a failure
        sh.failure = e
        sh.sync.shutdown()
        sh.buf.shutdown()


# ---- main: the trainer ---------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
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
        info = rlpost.model_inspect(args.model)
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
    workers, threads, engines = [], [], []
    ctx = rlpost.Context(n_threads=args.threads)
    policy = rlpost.Policy(ctx, args.model)
    policy.set_optimizer(lr=1e-3)
    try:
        if args.local:
            sync = rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, transport=rlpost.SyncTransport.IN_PROCESS,
                                       max_staleness=args.eta, batch_groups=args.prompts)
            engines = [rlpost.RolloutEngine(policy, max_batch=args.prompts * args.group, max_seq_len=256)
                       for _ in range(args.workers)]
        else:
            workers = [Worker(driver, args.model, folder, i, args.threads) for i in range(args.workers)]
            urls = [w.url for w in workers]
            log("%d workers at %s" % (len(urls), ", ".join(urls)))
            sync = rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, transport=rlpost.SyncTransport.HTTP,
                                       max_staleness=args.eta, batch_groups=args.prompts, dir=folder, urls=urls,
                                       timeout_ms=60000, max_retries=2)
            engines = [rlpost.RolloutEngine.remote(urls, tokenizer=policy.tokenizer, timeout_ms=120000,
                                                   max_retries=3)]
        buf = rlpost.ReplayBuffer(sync=sync)  # one η: the gate's
        reward = rlpost.RewardFn(even_share, name="even_share", n_threads=2)
        sync.publish(policy)  # version 0: where every worker starts
        sh = Shared(sync, buf, reward, info.vocab_size, args)
        threads = [threading.Thread(target=rollout_loop, args=(sh, e), daemon=True) for e in engines]
        for t in threads:
            t.start()

        seen = {}
        t0, train_s, trained, failed = time.monotonic(), 0.0, 0, False
        for step in range(args.steps):
            try:
                b = buf.pull(args.prompts, policy.version, timeout_ms=300000)
            except rlpost.Error as e:
                log("step %d: no batch: %s" % (step, e))
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
        # stop the rollout side: a generate call in flight finishes, its push then fails
        # with ClosedError and its slots are released unaccepted
        sync.shutdown()
        buf.shutdown()
        for t in threads:
            t.join(300)
        bs, ss = buf.stats(), sync.stats()
        duplicates = sum(c - 1 for c in seen.values())
        books = (sh.pushed == bs.accepted == bs.consumed + bs.dropped_stale + bs.size
                 and len(seen) == bs.consumed and duplicates == 0)
        ok = not failed and books and sh.failure is None and not any(t.is_alive() for t in threads)
        print(json.dumps({"summary": True, "ok": ok, "mode": "local" if args.local else "processes",
                          "steps": args.steps, "workers": args.workers, "eta": args.eta,
                          "seconds": round(wall, 3), "trained_trajectories": trained,
                          "trajectories_per_s": trained / wall if wall > 0 else 0.0,
                          "generated_trajectories": sh.generated,
                          "trainer_busy_fraction": train_s / wall if wall > 0 else 0.0,
                          "pushed_groups": sh.pushed, "accepted": bs.accepted, "consumed": bs.consumed,
                          "dropped_stale": bs.dropped_stale, "held": bs.size, "consumed_distinct_ids": len(seen),
                          "duplicates": duplicates, "error_groups": sh.error_groups,
                          "unpushed_at_close": sh.unpushed, "pull_failures": sh.pull_failures,
                          "publishes": ss.publishes, "weight_loads": ss.weight_loads}), flush=True)
        if sh.failure is not None:
            log("a rollout thread failed: %r" % (sh.failure,))
        if not ok:
            log("FAILED: the run stopped early or the group bookkeeping does not add up")
        reward.close()
        buf.close()
        for e in engines:
            e.close()
        sync.close()
        return 0 if ok else 1
    finally:
        for w in workers:
            w.stop()
        policy.close()
        ctx.close()
        if not args.dir:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
