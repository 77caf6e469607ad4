#!/usr/bin/env bash
# Join the compile caches a device run packed ($OUT/devcache.tgz.part-*, scripts/device_run.sh) into
# .devcache.tgz for the next call's carry, small enough to travel with the working tree and the wheels
# (the carry limit is 64 MiB). Triton's cache is most of it: for every kernel fla compiles it keeps the
# intermediate forms (ttir, ttgir, llir: over half its bytes) and the ptx beside the cubin that a later run
# loads (the cubin is what Triton launches; the ptx only fills the kernel's asm listing). They are kept as
# empty files (the cache's group index lists them; a missing file would make Triton
# compile the kernel again), so a run on a fresh machine loads every cubin instead of recompiling.
#   bash scripts/pack_devcache.sh /work/.device/N      # the folder holding devcache.tgz.part-*
set -euo pipefail
src=${1:?usage: pack_devcache.sh FOLDER_WITH_devcache.tgz.part-*}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat "$src"/devcache.tgz.part-* | tar xzf - -C "$tmp"
find "$tmp" -path "*/triton/*" \( -name "*.llir" -o -name "*.ttir" -o -name "*.ttgir" -o -name "*.ptx" \) -exec truncate -s 0 {} +
rm -rf "$tmp/.devcache/emu"   # the CPU model's builds: never used on the device
tar czf "$root/.devcache.tgz.tmp" -C "$tmp" .devcache
mv "$root/.devcache.tgz.tmp" "$root/.devcache.tgz"
ls -l "$root/.devcache.tgz"
