#!/bin/sh
# Checks the library's machine code for the copy form ptxas (CUDA 13.0) emitted for an L2-hinted
# cp.async in some ring kernels: a shared address with a uniform-register offset beside a memory
# descriptor operand (LDGSTS [R+URn+imm], desc[URn+1]), which failed on sm_90 with an illegal
# instruction. It checks the form, not whether the descriptor is set, and only the SASS in the
# library (not PTX the driver would compile at load time).
# Usage: sass_check.sh CUOBJDUMP LIBRARY. Fails when cuobjdump fails or finds no cp.async at all
# (the check would then prove nothing).
set -eu
sass=$(mktemp)
trap 'rm -f "$sass"' EXIT
"$1" -sass "$2" >"$sass" || { echo "$1 -sass $2 failed"; exit 1; }
copies=$(grep -c "LDGSTS" "$sass" || true)
form='LDGSTS[^;]*\[R[0-9]+\+UR[0-9]+[^]]*\], desc\['
bad=$(grep -cE "$form" "$sass" || true)
echo "cp.async instructions: $copies; with a uniform-register offset and a descriptor: $bad"
[ "$copies" -gt 0 ] || { echo "no cp.async in $2"; exit 1; }
[ "$bad" -eq 0 ] || { grep -E "$form" "$sass" | head -5; exit 1; }
