#!/usr/bin/env bash
# How the recorded GPU runs are made on the lent H200 (no network there): install the Jupyter
# stack from carried wheels, run the given command, and pack results + reports into $OUT.
#   bash scripts/device_run.sh python -m attnlab.report --profile full
#
# Compile caches: each lent machine starts bare, so the lab's cache root (CuPy's and the arch-specific
# NVRTC cubins, Triton's kernels and autotuning results: attnlab.paths.use_persistent_caches) is kept
# in .devcache/ of the working tree. After the run it is packed into $OUT/devcache.tgz.part-aa, -ab, ...
# (15 MiB pieces: a file over 16 MiB does not come back from the device); join them into the checkout
# as .devcache.tgz (`cat devcache.tgz.part-* > .devcache.tgz`) and carry it (`carry: [".whl",
# ".devcache.tgz"]`: packed, it fits the carry limit that the unpacked folder does not) to start the
# next call warm, as a second run on one machine would. With notebook 13's Triton cache (fla's kernels) the
# packed folder is too large to carry beside the working tree and the wheels: scripts/pack_devcache.sh
# FOLDER joins the pieces and empties Triton's intermediate files (a fresh machine then loads fla's cubins
# instead of compiling them: without any cache, notebook 13 spends minutes compiling before it measures).
# Provenance: the device's copy of the working tree comes with the git metadata of the session's
# start, not of the commit being run, so every row would read `git_dirty True` under an old commit.
# Carry the commits since then as a bundle (here: `git bundle create .devgit.bundle START..HEAD`,
# START being a commit the device's copy has; `carry: [..., ".devgit.bundle"]`): this script fetches
# it and points HEAD and the index at its tip, so `git status` there compares the tree that runs with
# the commit it claims to be; a tree that differs still reads dirty.
# ATTNLAB_DEVICE_TIMEOUT=S stops the command after S seconds (SIGINT: the report runner records what
# finished), so the results are still packed before the call's own limit.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/lib PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH JUPYTER_PATH=/tmp/site/share/jupyter
export ATTNLAB_CACHE_DIR=${ATTNLAB_CACHE_DIR:-$PWD/.devcache}
mkdir -p "$ATTNLAB_CACHE_DIR"
if [ -f .devgit.bundle ]; then
  git fetch -q .devgit.bundle HEAD && git reset -q --mixed FETCH_HEAD || echo "device_run: .devgit.bundle not applied"
fi
echo "commit: $(git rev-parse HEAD 2>/dev/null), changed files: $(git status --porcelain --untracked-files=no 2>/dev/null | wc -l)"
if [ -f .devcache.tgz ]; then tar xzf .devcache.tgz -C "$(dirname "$ATTNLAB_CACHE_DIR")"; fi
echo "compile caches: $ATTNLAB_CACHE_DIR ($(find "$ATTNLAB_CACHE_DIR" -type f | wc -l) files at the start)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
guard=()
if [ -n "${ATTNLAB_DEVICE_TIMEOUT:-}" ]; then guard=(timeout --signal=INT --kill-after=30 "$ATTNLAB_DEVICE_TIMEOUT"); fi
${guard[@]+"${guard[@]}"} "$@" 2>&1 | grep -v "running over TCP without encryption" | tee "${OUT:-/tmp}/log.txt"
rc=${PIPESTATUS[0]}
tar czf "${OUT:-/tmp}/results.tgz" data/results data/tuned reports 2>/dev/null
tar czf - -C "$(dirname "$ATTNLAB_CACHE_DIR")" "$(basename "$ATTNLAB_CACHE_DIR")" 2>/dev/null \
  | split -b 15M - "${OUT:-/tmp}/devcache.tgz.part-"
ls -l "${OUT:-/tmp}"/*.tgz*
exit $rc
