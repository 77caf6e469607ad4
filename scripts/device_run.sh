#!/usr/bin/env bash
# How the recorded GPU runs are made on the lent H200 (no network there): install the Jupyter
# stack from carried wheels, run the given command, and pack results + reports into $OUT.
#   bash scripts/device_run.sh python -m attnlab.report --profile full
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/lib PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH JUPYTER_PATH=/tmp/site/share/jupyter
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
"$@" 2>&1 | grep -v "running over TCP without encryption" | tee "${OUT:-/tmp}/log.txt"
rc=${PIPESTATUS[0]}
tar czf "${OUT:-/tmp}/results.tgz" data/results data/tuned reports 2>/dev/null
exit $rc
