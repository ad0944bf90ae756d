#!/usr/bin/env python3
"""Held-out comparison of bf16 against fp32 GEMMs on the default job.

Usage: compare.py [--seed FP32_FINAL BF16_FINAL]... FP32_RUN BF16_RUN [FP32_RUN BF16_RUN ...]
Each run argument is the output folder of `rlpost train configs/default.json
--set seed=S --set 'matmul_precision="fp32"'` (or "bf16"/"auto"), same seed
in a pair. Prints, per pair, the held-out greedy accuracy before and after,
the training split and the mismatch figures, and, pooled over the pairs,
the mean paired difference of the final greedy correctness (bf16 - fp32)
with a 95 % bootstrap interval over the (prompt, seed) items (10,000
resamples). Then the seed-level view, which also counts how much a seed's
whole trajectory varies: the per-seed differences of the final greedy
accuracy (the run pairs, plus any --seed pairs of final accuracies whose
folders are not at hand) with their mean and a 95 % Student t interval.
"""
import json
import random
import sys


def load(d):
    m = [json.loads(l) for l in open(d + "/metrics.jsonl")]
    e = [json.loads(l) for l in open(d + "/eval.jsonl")]
    return m, e


def run_line(d, m, e):
    tot = lambda k: sum(x[k] for x in m)
    toks = tot("completion_tokens")
    return ("%-28s greedy %.3f -> %.3f (%+.3f)  sampled %.3f -> %.3f  rollout %.1f s, train %.1f s, "
            "%d completion tokens (%.2f / %.2f ms per token)  mismatch_kl mean %.4f" %
            (d.rstrip("/").split("/")[-1], e[0]["greedy_accuracy"], e[-1]["greedy_accuracy"],
             e[-1]["greedy_accuracy"] - e[0]["greedy_accuracy"], e[0]["sampled_accuracy"],
             e[-1]["sampled_accuracy"], tot("rollout_seconds"), tot("train_seconds"), toks,
             1000 * tot("rollout_seconds") / toks, 1000 * tot("train_seconds") / toks,
             tot("mismatch_kl") / len(m)))


# two-sided 97.5 % quantiles of Student's t, by degrees of freedom
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def main(args):
    seeds = []
    while args[:1] == ["--seed"]:
        seeds.append((float(args[1]), float(args[2])))
        args = args[3:]
    if len(args) < 2 or len(args) % 2:
        sys.exit(__doc__)
    diff = []
    for a, b in zip(args[0::2], args[1::2]):
        (ma, ea), (mb, eb) = load(a), load(b)
        print(run_line(a, ma, ea))
        print(run_line(b, mb, eb))
        diff += [y - x for x, y in zip(ea[-1]["greedy_correct"], eb[-1]["greedy_correct"])]
        seeds.append((ea[-1]["greedy_accuracy"], eb[-1]["greedy_accuracy"]))
    rng = random.Random(0)
    n = len(diff)
    means = sorted(sum(diff[rng.randrange(n)] for _ in range(n)) / n for _ in range(10000))
    print("final greedy accuracy, bf16 - fp32, pooled over %d items: %+.4f [%+.4f, %+.4f]" %
          (n, sum(diff) / n, means[250], means[9749]))
    d = [b - a for a, b in seeds]
    k = len(d)
    mean = sum(d) / k
    if k > 1:
        sd = (sum((x - mean) ** 2 for x in d) / (k - 1)) ** 0.5
        h = T975.get(k - 1, 1.96) * sd / k ** 0.5
        print("seed level, %d seeds: per-seed bf16 - fp32 %s; mean %+.4f [%+.4f, %+.4f] (t, %d df)" %
              (k, " ".join("%+.3f" % x for x in d), mean, mean - h, mean + h, k - 1))


if __name__ == "__main__":
    main(sys.argv[1:])
