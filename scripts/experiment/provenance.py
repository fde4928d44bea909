"""Where a cell ran (cell.json): the code's commit and the machine."""
import os
import platform
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _git(*args):
    try:
        r = subprocess.run(["git", "-C", ROOT] + list(args), stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    except OSError:
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def _outside(out):
    """A pathspec for the tree outside the results folder `out`."""
    rel = os.path.relpath(os.path.abspath(out), ROOT)
    return ["--", "."] + ([] if rel.startswith("..") else [f":(exclude){rel}"])


def code_commit(out, rev="HEAD"):
    """The last commit at or before `rev` that changed anything outside the
    results folder `out` (a matrix committed as it runs adds commits of its
    own cells, which change no code); `rev` itself where git cannot say."""
    return _git("log", "-1", "--format=%H", rev, *_outside(out)) or _git("rev-parse", rev) or rev


def cell(out):
    """The code's commit, whether tracked files outside `out` differ from it
    (dirty), and the machine."""
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                  if line.startswith("model name")), platform.processor())
    return {"commit": code_commit(out),
            "dirty": bool(_git("status", "--porcelain", "--untracked-files=no", *_outside(out))),
            "machine": {"host": platform.node(), "cpus": os.cpu_count(), "cpu": model,
                        "kernel": platform.release()}}
