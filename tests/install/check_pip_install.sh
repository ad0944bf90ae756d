#!/bin/sh
# `pip install bindings/python` as a user does it, from a clean copy of the
# repository (its tracked files only: no build folder, no model) into a
# fresh virtual environment: the wheel must build librlpost itself and
# bundle it, and the package must then work with the copy of the
# repository deleted, from another folder, without RLPOST_LIBRARY — a
# version call, a built-in reward scored through the library, and the
# same reward from a library in the bundled worker process. Then
# RLPOST_LIBRARY must still override the bundled copy.
#   check_pip_install.sh SOURCE_ROOT PYTHON3 [LIBRARY_FOR_THE_OVERRIDE_CHECK]
# Skips (77) without python3-venv, or without network on a Python that
# needs tomli from PyPI (< 3.11).
set -u
src=$1 py=$2 override=${3:-}
"$py" -c 'import venv, ensurepip' 2>/dev/null ||
    { echo "python3 -m venv unavailable (apt-get install python3-venv): skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/clone"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    # what a clone would hold once the working tree is committed: tracked and
    # new files, not the ignored ones (build folders, models/); a clone of
    # HEAD would miss uncommitted edits
    git -C "$src" ls-files -z --cached --others --exclude-standard |
        (cd "$src" && xargs -0 tar -cf - --no-recursion) | tar -xf - -C "$work/clone"
else
    (cd "$src" && tar -cf - --exclude='./build*' --exclude=./models --exclude=./runs .) | tar -xf - -C "$work/clone"
fi
"$py" -m venv "$work/venv" || { echo "python3 -m venv failed"; exit 1; }
pip_args=""
# Python >= 3.11 needs nothing from PyPI to build the wheel: prove it offline
"$work/venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' && pip_args="--no-index"
start=$(date +%s)
if ! (cd "$work" && env -u RLPOST_LIBRARY "$work/venv/bin/pip" install --disable-pip-version-check \
        $pip_args "$work/clone/bindings/python") >"$work/pip.log" 2>&1; then
    if [ -z "$pip_args" ] && grep -qiE "tomli|connection|network|resolve" "$work/pip.log"; then
        tail -5 "$work/pip.log"; echo "no network for tomli (Python < 3.11): skipped"; exit 77
    fi
    tail -40 "$work/pip.log"; echo "pip install bindings/python failed"; exit 1
fi
echo "pip install bindings/python: $(( $(date +%s) - start )) s"
grep -E "Created wheel|Successfully installed" "$work/pip.log"
# a reward library for RewardFn.isolated (rlpost_reward_create, as
# `reward.library` of rlpost train): the bundled worker process must find
# the bundled librlpost beside it
cat >"$work/reward.c" <<'C'
/* the two declarations it needs (rlpost.h includes a generated header) */
typedef struct rlp_reward_fn rlp_reward_fn;
int rlp_reward_fn_create_builtin(rlp_reward_fn **out, const char *name, const char *options_json);
int rlpost_reward_create(rlp_reward_fn **out, const char *options_json);
int rlpost_reward_create(rlp_reward_fn **out, const char *options_json)
{
    return rlp_reward_fn_create_builtin(out, "gsm8k", options_json);
}
C
cc_cmd=${CC:-cc}
$cc_cmd -shared -fPIC -o "$work/reward.so" "$work/reward.c" ||
    { echo "cannot compile the test's reward library"; exit 1; }
rm -rf "$work/clone"
mkdir "$work/elsewhere"
cd "$work/elsewhere" || exit 1
env -u RLPOST_LIBRARY -u PYTHONPATH -u LD_LIBRARY_PATH "$work/venv/bin/python" - "$work/venv" <<'PY' || exit 1
import os, sys
import rlpost
venv = os.path.realpath(sys.argv[1])
print("rlpost", rlpost.version_string(), "ABI", rlpost.abi_version(), "from", rlpost.library_path)
assert os.path.realpath(rlpost.__file__).startswith(venv), rlpost.__file__
assert os.path.realpath(rlpost.library_path).startswith(venv), "not the bundled library: " + rlpost.library_path
assert os.path.basename(rlpost.library_path) == "librlpost.so.0", rlpost.library_path
with rlpost.RewardFn.builtin("gsm8k") as reward:
    right = reward.score_one("6 times 7 is 42.\n#### 42", reference="42")
    wrong = reward.score_one("#### 41", reference="42")
print("gsm8k reward:", right, wrong)
assert right.valid and right.score == 1.0 and wrong.score == 0.0
# the same reward from a library in a worker process (the bundled worker)
with rlpost.RewardFn.isolated(os.path.join(os.path.dirname(venv), "reward.so")) as iso:
    got = iso.score_one("#### 42", reference="42")
print("isolated gsm8k reward:", got)
assert got.valid and got.score == 1.0, got
PY
if [ -n "$override" ]; then
    got=$(env -u PYTHONPATH RLPOST_LIBRARY="$override" "$work/venv/bin/python" -c \
        'import rlpost; print(rlpost.library_path)') || exit 1
    [ "$got" = "$override" ] || { echo "RLPOST_LIBRARY=$override did not override the bundled copy: $got"; exit 1; }
    echo "RLPOST_LIBRARY overrides the bundled copy: $got"
fi
echo "pip install bindings/python: bundled librlpost works without the repository"
