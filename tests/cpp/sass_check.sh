#!/bin/sh
# Checks the library's machine code for the copy form ptxas (CUDA 13.0) emitted for an L2-hinted
# cp.async in some ring kernels: a shared address with a uniform-register offset beside a memory
# descriptor in uniform registers that nothing set, which fails on sm_90 with an illegal
# instruction. Usage: sass_check.sh CUOBJDUMP LIBRARY. Fails when no cp.async is found at all
# (the check would then prove nothing).
set -eu
sass=$(mktemp)
trap 'rm -f "$sass"' EXIT
"$1" -sass "$2" | grep -E "LDGSTS" >"$sass" || true
copies=$(wc -l <"$sass")
bad=$(grep -cE '\[R[0-9]+\+UR[0-9]+[^]]*\], desc\[' "$sass" || true)
echo "cp.async instructions: $copies; with a uniform-register offset and a descriptor: $bad"
[ "$copies" -gt 0 ] || { echo "no cp.async in $2"; exit 1; }
[ "$bad" -eq 0 ] || { grep -E '\[R[0-9]+\+UR[0-9]+[^]]*\], desc\[' "$sass" | head -5; exit 1; }
