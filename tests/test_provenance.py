"""Provenance taken for real, without a GPU: ``env.git_commit`` against a scratch git repository
(clean, modified, staged, untracked, ignored), ``env.nvidia_smi_query`` against a stand-in
``nvidia-smi`` that answers the query it is given with canned H200 figures, and ``env.provenance``
putting them together for a live-mode row.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import attnlab.env as env
from attnlab.env import Mode

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is needed")

LIVE = Mode(True, "h200", "NVIDIA H200", "live", "test")

# What `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` prints on the recording machine
# (the first GPU's figures are those of data/results/h200/*.csv); a second GPU with other clocks.
SMI = [
    {"driver_version": "580.159.04", "clocks.sm": "1980", "clocks.mem": "3201", "clocks.max.sm": "1980",
     "temperature.gpu": "34", "power.draw": "118.52", "name": "NVIDIA H200"},
    {"driver_version": "580.159.04", "clocks.sm": "345", "clocks.mem": "1593", "clocks.max.sm": "1980",
     "temperature.gpu": "29", "power.draw": "74.10", "name": "NVIDIA H200"},
]


def git(repo, *args) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A committed tree with the lab's layout; no override of the commit from the environment."""
    for var in ("ATTNLAB_GIT_COMMIT", "ATTNLAB_GIT_DIRTY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for who in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{who}_NAME", "attnlab test")
        monkeypatch.setenv(f"GIT_{who}_EMAIL", "test@attnlab.invalid")
    root = tmp_path / "repo"
    for rel, text in {"kernels/attention/01_naive.cu": "// naive\n", "lib/attnlab/__init__.py": "",
                      "notebooks/01_naive.ipynb": "{}\n", "README.md": "lab\n",
                      "data/results/h200/01_naive__timing.csv": "kernel\nnaive\n",
                      ".gitignore": "__pycache__/\n*.tmp\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


def test_clean_tree(repo):
    commit, dirty = env.git_commit(repo)
    assert commit == git(repo, "rev-parse", "HEAD") and len(commit) == 40
    assert dirty is False


@pytest.mark.parametrize("rel", ["kernels/attention/02_tiled.cu", "lib/attnlab/new_module.py",
                                 "notebooks/02_tiling.ipynb", "kernels/new_dir/deep/x.cuh"])
def test_untracked_code_is_dirty(repo, rel):
    # A new kernel or module the commit does not hold: the measurement cannot be rebuilt from it.
    (repo / rel).parent.mkdir(parents=True, exist_ok=True)
    (repo / rel).write_text("new\n")
    assert env.git_commit(repo)[1] is True


@pytest.mark.parametrize("rel", ["kernels/attention/01_naive.cu", "lib/attnlab/__init__.py",
                                 "notebooks/01_naive.ipynb"])
def test_modified_tracked_code_is_dirty(repo, rel):
    (repo / rel).write_text((repo / rel).read_text() + "// edit\n")
    assert env.git_commit(repo)[1] is True
    git(repo, "add", rel)                      # staged but not committed: still dirty
    assert env.git_commit(repo)[1] is True
    git(repo, "commit", "-q", "-m", "edit")
    commit, dirty = env.git_commit(repo)
    assert dirty is False and commit == git(repo, "rev-parse", "HEAD")


def test_deleted_tracked_code_is_dirty(repo):
    (repo / "kernels/attention/01_naive.cu").unlink()
    assert env.git_commit(repo)[1] is True


@pytest.mark.parametrize("rel", ["README.md", "data/results/h200/01_naive__timing.csv",
                                 "data/results/h200/02_tiling__timing.csv", "reports/01_naive.html",
                                 "lib/attnlab/__pycache__/env.cpython-311.pyc", "kernels/scratch.tmp"])
def test_results_docs_and_ignored_files_are_not_dirt(repo, rel):
    # The run itself writes results and reports; ignored build products are no code either.
    p = repo / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text((p.read_text() if p.exists() else "") + "x\n")
    assert env.git_commit(repo)[1] is False


def test_untracked_and_modified_together(repo):
    (repo / "lib/attnlab/__init__.py").write_text("x = 1\n")
    (repo / "kernels/attention/02_tiled.cu").write_text("// new\n")
    assert env.git_commit(repo)[1] is True
    (repo / "lib/attnlab/__init__.py").write_text("")          # back to the commit
    assert env.git_commit(repo)[1] is True                      # the untracked kernel remains
    (repo / "kernels/attention/02_tiled.cu").unlink()
    assert env.git_commit(repo)[1] is False


def test_no_repository_is_unknown_not_clean_commit(tmp_path, monkeypatch):
    monkeypatch.delenv("ATTNLAB_GIT_COMMIT", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    bare = tmp_path / "tree"
    bare.mkdir()
    assert env.git_commit(bare)[0] == "unknown"


def test_environment_override_for_trees_without_git(repo, monkeypatch):
    monkeypatch.setenv("ATTNLAB_GIT_COMMIT", "0123abc")
    assert env.git_commit(repo) == ("0123abc", False)
    monkeypatch.setenv("ATTNLAB_GIT_DIRTY", "1")
    assert env.git_commit(repo) == ("0123abc", True)


def test_the_checkout_itself_answers():
    # The default repository is this one: a 40-hex commit (or the override), a boolean flag.
    commit, dirty = env.git_commit()
    assert isinstance(dirty, bool)
    if not os.environ.get("ATTNLAB_GIT_COMMIT") and (env.REPO_ROOT / ".git").exists():
        assert len(commit) == 40 and int(commit, 16) >= 0


# ----------------------------------------------------------------------------- nvidia-smi

def fake_smi(bin_dir, gpus=SMI, rc=0):
    """An executable ``nvidia-smi`` that prints the requested fields, in the requested order."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""\
        import sys
        GPUS = {gpus!r}
        args = sys.argv[1:]
        query = [a for a in args if a.startswith("--query-gpu=")]
        if {rc} or len(query) != 1 or "--format=csv,noheader,nounits" not in args:
            sys.exit({rc} or 6)
        fields = query[0].split("=", 1)[1].split(",")
        for gpu in GPUS:
            print(", ".join(gpu[f] for f in fields))
        """))
    script.chmod(0o755)
    return bin_dir


def test_clocks_parsed_from_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}")
    smi = env.nvidia_smi_query()
    assert smi == {k: SMI[0][k] for k in ("driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm",
                                         "temperature.gpu", "power.draw")}


def test_nvidia_smi_absent_or_failing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert env.nvidia_smi_query() == {}
    monkeypatch.setenv("PATH", str(fake_smi(tmp_path / "bin", rc=9)))
    assert env.nvidia_smi_query() == {}


# ----------------------------------------------------------------------------- the stamped columns

@pytest.fixture
def machine(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(env, "_static_provenance", lambda: {"cupy_version": "14.2.0", "cuda_runtime": "13020",
                                                            "cuda_driver_api": "13000",
                                                            "torch_version": "2.11.0+cu130", "torch_cuda": "13.0"})


@pytest.mark.parametrize("dirt", [None, "untracked", "modified"])
def test_provenance_of_a_live_row(repo, machine, dirt):
    if dirt == "untracked":
        (repo / "kernels/attention/02_tiled.cu").write_text("// new\n")
    elif dirt == "modified":
        (repo / "kernels/attention/01_naive.cu").write_text("// changed\n")
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    info = env.provenance(LIVE, repo)
    after = dt.datetime.now(dt.timezone.utc)
    assert info["gpu_name"] == "NVIDIA H200" and info["gpu"] == "h200" and info["mode"] == "live"
    assert info["driver_version"] == "580.159.04"
    assert (info["sm_clock_mhz"], info["mem_clock_mhz"], info["max_sm_clock_mhz"], info["gpu_temp_c"]) == \
        ("1980", "3201", "1980", "34")
    assert info["git_commit"] == git(repo, "rev-parse", "HEAD")
    assert info["git_dirty"] == str(dirt is not None)
    assert info["cupy_version"] == "14.2.0" and info["torch_cuda"] == "13.0"
    stamp = dt.datetime.fromisoformat(info["timestamp_utc"])
    assert stamp.utcoffset() == dt.timedelta(0) and before <= stamp <= after
    assert all(isinstance(v, str) for v in info.values()), "every column is written as text"


def test_provenance_without_nvidia_smi_leaves_clocks_empty(repo, machine, tmp_path, monkeypatch):
    only_git = tmp_path / "only-git"
    only_git.mkdir()
    (only_git / "git").symlink_to(shutil.which("git"))
    monkeypatch.setenv("PATH", str(only_git))
    info = env.provenance(LIVE, repo)
    assert info["driver_version"] == "unknown" and info["sm_clock_mhz"] == "" and info["gpu_temp_c"] == ""


def test_replay_never_takes_provenance():
    with pytest.raises(ValueError, match="only taken in live mode"):
        env.provenance(Mode(False, "h200", "h200", "replay", "test"))
