#!/bin/sh
# Compares the built librlpost.so against the committed ABI baseline with
# abidiff (abigail-tools). The baseline is the public interface only (written
# by tests/abi/update_baselines.sh): every exported function and the layout
# of every public struct, so a moved field or a grown struct is a type change
# here (the test abi_tables_agree checks that no struct is missing from it).
# New functions pass: they are listed, then left
# out of the verdict (--no-added-syms). Any change to what existed fails: bit 8 (incompatible, e.g. a
# removed symbol) and bit 4 (a changed type or signature). Options structs
# that grew at the end by our versioning rule show up as bit 4 too: that is
# reviewed and the baseline moved on purpose (docs/ABI.md).
set -u
lib=$1 suppr=$2 baseline=$3
command -v abidiff >/dev/null 2>&1 && command -v abidw >/dev/null 2>&1 || { echo "abidiff/abidw not installed (apt-get install abigail-tools): skipped"; exit 77; }
[ -f "$baseline" ] || { echo "no baseline at $baseline"; exit 1; }
# The library's interface as update_baselines.sh would write it: the types of
# include/rlpost.h, include/rlpost/*.h and rlpost_version.h, matched by path
# (public_headers.suppr; not --headers-dir, see that file). abidiff then
# compares two abixml files (it cannot apply that suppression to the
# baseline's XML: its reader aborts on the types it drops).
cur=$(mktemp)
trap 'rm -f "$cur"' EXIT
abidw --suppressions "$suppr" --exported-interfaces-only --drop-undefined-syms \
      --no-corpus-path --no-comp-dir-path --short-locs --out-file "$cur" "$lib" ||
    { echo "abidw failed on $lib"; exit 1; }
abidiff "$baseline" "$cur" | grep -E "Added function|^  \[A\]" || true
abidiff --no-added-syms "$baseline" "$cur"
rc=$?
if [ $((rc & 1)) -ne 0 ] || [ $((rc & 2)) -ne 0 ]; then echo "abidiff failed to run (rc=$rc)"; exit 1; fi
if [ $((rc & 8)) -ne 0 ]; then echo "INCOMPATIBLE ABI change against $baseline"; exit 1; fi
if [ $((rc & 4)) -ne 0 ]; then echo "ABI change against $baseline (see docs/ABI.md to move the baseline on purpose)"; exit 1; fi
echo "ABI compatible with baseline"
exit 0
