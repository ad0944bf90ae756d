#!/bin/sh
# `ninja -C build abi-update`: moves both ABI baselines to the library and
# header just built — on purpose, in a reviewed commit (docs/ABI.md).
#   tests/abi/struct_layout.txt  sizeof/offsetof of every public struct and field
#   tests/abi/librlpost.abi      abidw of the public interface: functions and
#                                every public struct's layout, nothing internal
set -eu
probe=$1 lib=$2 abi_dir=$3
"$probe" --write "$abi_dir/struct_layout.txt"
command -v abidw >/dev/null 2>&1 || { echo "abidw not installed (apt-get install abigail-tools)"; exit 1; }
# public_headers.suppr: only types the public headers (include/rlpost.h,
# include/rlpost/*.h, rlpost_version.h) declare, matched by path;
# --exported-interfaces-only --drop-undefined-syms: only what librlpost
# exports (not the libc functions it calls); no paths of this machine
abidw --suppressions "$abi_dir/public_headers.suppr" \
      --exported-interfaces-only --drop-undefined-syms \
      --no-corpus-path --no-comp-dir-path --short-locs \
      --out-file "$abi_dir/librlpost.abi" "$lib"
echo "wrote $abi_dir/librlpost.abi: $(grep -c '<function-decl' "$abi_dir/librlpost.abi") functions," \
     "$(grep -c "<class-decl name='rlp_[a-z_]*' size-in-bits" "$abi_dir/librlpost.abi") struct layouts"
