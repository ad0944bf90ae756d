#!/bin/sh
# Fails unless every dynamic symbol that librlpost.so defines is rlp_* (the
# version node RLPOST_* is the linker's own), and the public API is there.
set -eu
lib=$1
NM=${NM:-nm}
syms=$("$NM" -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//')
bad=$(printf '%s\n' "$syms" | grep -v -e '^rlp_' -e '^RLPOST_' || true)
if [ -n "$bad" ]; then
  echo "non-rlp_ symbols exported from $lib:"; printf '%s\n' "$bad"; exit 1
fi
for want in rlp_version_number rlp_error_last rlp_context_create rlp_backend_available; do
  printf '%s\n' "$syms" | grep -qx "$want" || { echo "missing export: $want"; exit 1; }
done
echo "$(printf '%s\n' "$syms" | grep -c '^rlp_') rlp_* symbols exported, nothing else"
