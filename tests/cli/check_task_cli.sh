#!/bin/sh
# `rlpost task`: N lines of JSON with prompt, reference and metadata; the
# same seed prints the same problems; bad arguments exit 2. Skips (77)
# without python3, which reads the JSON.
set -u
rlpost=$1
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$rlpost" task kk --seed 3 --n 5 --people 4 >"$out/kk1" || { echo "kk failed"; exit 1; }
"$rlpost" task kk --seed 3 --n 5 --people 4 >"$out/kk2" || exit 1
"$rlpost" task countdown --seed 3 --n 7 --options '{"count": 4}' >"$out/cd" || { echo "countdown failed"; exit 1; }
cmp -s "$out/kk1" "$out/kk2" || { echo "same seed, different output"; exit 1; }
"$rlpost" task lookup --seed 5 --n 6 --options '{"entities": 50, "min_hops": 3, "max_hops": 3}' >"$out/lk1" || { echo "lookup failed"; exit 1; }
"$rlpost" task lookup --seed 5 --n 6 --options '{"entities": 50, "min_hops": 3, "max_hops": 3}' >"$out/lk2" || exit 1
cmp -s "$out/lk1" "$out/lk2" || { echo "lookup: same seed, different output"; exit 1; }

python3 - "$out/kk1" "$out/cd" "$out/lk1" <<'PY' || exit 1
import json, re, sys
kk = [json.loads(l) for l in open(sys.argv[1])]
assert len(kk) == 5, len(kk)
for r in kk:
    m = r["metadata"]
    assert r["reference"] == m["reference"] == m["solution_text_format"]
    lines = r["reference"].split("\n")
    assert len(lines) == 4 and len(m["names"]) == 4
    for i, (line, name, knight) in enumerate(zip(lines, m["names"], m["solution"])):
        assert line == "(%d) %s is a %s" % (i + 1, name, "knight" if knight else "knave"), line
        assert name in r["prompt"]
    assert r["prompt"].startswith("A very special island")
cd = [json.loads(l) for l in open(sys.argv[2])]
assert len(cd) == 7
for r in cd:
    m = r["metadata"]
    assert len(m["numbers"]) == 4 and m["reference"] == r["reference"]
    assert sorted(int(x) for x in re.findall(r"\d+", r["reference"])) == sorted(m["numbers"])
lk = [json.loads(l) for l in open(sys.argv[3])]
assert len(lk) == 6
for r in lk:
    m = r["metadata"]
    assert m["hops"] == 3 and m["kb_seed"] == 5 and m["entities"] == 50 and m["reference"] == r["reference"]
    assert r["prompt"].count(" of ") >= 2 and r["reference"] not in r["prompt"]
print("ok")
PY

for bad in "task" "task chess" "task kk --people 9" "task countdown --people 3" "task kk --n 0" \
           "task kk --options [1]" "task kk --options {\"peeple\":3}" "task lookup --options {\"entities\":5}"; do
    # shellcheck disable=SC2086
    "$rlpost" $bad >/dev/null 2>&1
    rc=$?
    [ "$rc" -eq 2 ] || { echo "rlpost $bad: exit $rc, want 2"; exit 1; }
done
echo "rlpost task: ok"
