#!/bin/sh
# Loader and output edges (issue 18 item 9), on stories260K:
# - weights holding NaN are refused at load, naming the tensor and element
#   (rlpost logprobs and generate exit 1 with that message, print nothing);
# - values that come out non-finite (logprobs at temperature 1e-40) are
#   printed as null, with "non_finite_values" counting them: the document
#   stays strict JSON, and the command exits 1.
# Skips (77) without the shared data or python3.
# Usage: check_output_edges.sh RLPOST
set -u
rlpost=$1
data=${RLPOST_SHARED_DATA:-}/llama2c/stories260K.bin
[ -n "${RLPOST_SHARED_DATA:-}" ] && [ -f "$data" ] || { echo "no stories260K.bin: skipped"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

python3 - "$data" "$out/nan.bin" <<'PY' || fail "fixture"
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
for i in range(100, 110):  # after the 7-int header: token embeddings
    struct.pack_into("<f", b, 28 + 4 * i, float("nan"))
open(sys.argv[2], "wb").write(b)
PY
"$rlpost" logprobs "$out/nan.bin" --tokens 1,2,3 >"$out/lp.json" 2>"$out/err"
[ $? -eq 1 ] || fail "logprobs of NaN weights: exit status"
[ -s "$out/lp.json" ] && fail "logprobs of NaN weights printed a document"
grep -q "tensor model.embed_tokens.weight holds 10 non-finite values (the first, NaN, at element 100)" "$out/err" ||
  { cat "$out/err"; fail "NaN weights message"; }
"$rlpost" generate "$out/nan.bin" --prompt "Once" --max-new-tokens 2 >/dev/null 2>"$out/err"
[ $? -ne 0 ] && grep -q "non-finite" "$out/err" || { cat "$out/err"; fail "generate with NaN weights"; }

"$rlpost" logprobs "$data" --tokens 1,2,3,4 --temperature 1e-40 >"$out/t.json" 2>"$out/err"
[ $? -eq 1 ] || fail "non-finite logprobs: exit status"
grep -q "printed as null" "$out/err" || { cat "$out/err"; fail "non-finite message"; }
python3 - "$out/t.json" <<'PY' || fail "non-finite logprobs: not strict JSON"
import json, sys
def refuse(c):
    raise ValueError("non-JSON constant " + c)
doc = json.loads(open(sys.argv[1]).read(), parse_constant=refuse)
nulls = sum(t[k] is None for t in doc["tokens"][1:] for k in ("logprob", "entropy"))
assert doc["non_finite_values"] >= nulls > 0, doc
PY
"$rlpost" logprobs "$data" --tokens 1,2,3,4 >"$out/ok.json" 2>"$out/err" || { cat "$out/err"; fail "logprobs"; }
grep -q '"non_finite_values": 0}' "$out/ok.json" || fail "finite logprobs: the flag"
echo ok
