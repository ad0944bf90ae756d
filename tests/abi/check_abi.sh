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
lib=$1 include=$2 build=$3 baseline=$4
command -v abidiff >/dev/null 2>&1 || { echo "abidiff not installed (apt-get install abigail-tools): skipped"; exit 77; }
[ -f "$baseline" ] || { echo "no baseline at $baseline"; exit 1; }
abidiff --headers-dir2 "$include" --headers-dir2 "$build" --drop-private-types \
    "$baseline" "$lib" | grep -E "Added function|^  \[A\]" || true
abidiff --no-added-syms --headers-dir2 "$include" --headers-dir2 "$build" --drop-private-types \
    "$baseline" "$lib"
rc=$?
if [ $((rc & 1)) -ne 0 ] || [ $((rc & 2)) -ne 0 ]; then echo "abidiff failed to run (rc=$rc)"; exit 1; fi
if [ $((rc & 8)) -ne 0 ]; then echo "INCOMPATIBLE ABI change against $baseline"; exit 1; fi
if [ $((rc & 4)) -ne 0 ]; then echo "ABI change against $baseline (see docs/ABI.md to move the baseline on purpose)"; exit 1; fi
echo "ABI compatible with baseline"
exit 0
