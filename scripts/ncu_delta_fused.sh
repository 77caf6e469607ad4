#!/usr/bin/env bash
# Nsight Compute look at the 3xBF16 KDA kernels (06, or 07 -> 08) at B=2, H=16, K=V=128: full
# section set plus SASS-level stall sampling, exported as CSV into $OUT (a probe, not a recorded table).
#   bash scripts/ncu_delta_fused.sh [T] [BV] [impl: split|fused] [kernel regex]
set -uo pipefail
T=${1:-4096}; BV=${2:-32}; IMPL=${3:-split}; KRE=${4:-kda_chunk}
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 0; }
cat > /tmp/fused_target.py <<PY
from attnlab.delta import bench as db, kernels as dk
_, d = db.device_inputs(2, $T, 16, 128, 128, seed=0)
p = dk.prepare_tc(**d, bv=$BV, check_gate=False, impl="$IMPL")
p.run(); p.run()
import cupy as cp; cp.cuda.Device().synchronize()
PY
NK=$([ "$IMPL" = split ] && echo 2 || echo 1)
"$NCU" --set full --import-source yes -k regex:$KRE --launch-skip $NK --launch-count $NK \
    -f -o "$OUT/kda" python /tmp/fused_target.py > "$OUT/ncu_run.txt" 2>&1
tail -3 "$OUT/ncu_run.txt"
"$NCU" -i "$OUT/kda.ncu-rep" --page details --csv > "$OUT/kda_details.csv" 2>&1
"$NCU" -i "$OUT/kda.ncu-rep" --page source --csv --print-source sass > "$OUT/kda_sass.csv" 2>&1
ls -la "$OUT"
