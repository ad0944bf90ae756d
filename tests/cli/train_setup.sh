# Sourced by check_train_cli.sh and check_train_modes.sh (POSIX sh: $0 is
# the sourcing script, which sits beside this file): the stories260K run
# folder they start from. Sets $out (a temporary folder removed at exit), $model,
# $cfg (train_fixture.py's config), T (rlpost train on $cfg with $model) and
# fail; exits 77 (skip) without the shared data or python3. Expects $rlpost.
data=${RLPOST_SHARED_DATA:-}/llama2c/stories260K.bin
[ -n "${RLPOST_SHARED_DATA:-}" ] && [ -f "$data" ] || { echo "no stories260K.bin: skipped"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

python3 "$(dirname "$0")/train_fixture.py" "$out" || exit 1
model="$out/model.bin"
cp "$data" "$model"
cfg="$out/config.json"
T() { "$rlpost" train "$cfg" --set "model=\"$model\"" "$@"; }
