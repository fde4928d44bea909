"""Where a cell ran (cell.json): the code's commit and the machine."""
import os
import platform
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _git(*args, root=ROOT):
    try:
        r = subprocess.run(["git", "-C", root] + list(args), stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    except OSError:
        return None
    return r.stdout.strip() if r.returncode == 0 else None


# What is not code: documentation, and with it the results a matrix commits
# (docs/results/...). A commit touching only these changes no figure.
NOT_CODE = ("docs", "*.md")


def _outside(out, root=ROOT):
    """A pathspec for the code: the tree outside the results folder `out` and
    outside NOT_CODE."""
    rel = os.path.relpath(os.path.abspath(out), root)
    return ["--", "."] + [f":(exclude){x}" for x in NOT_CODE] + \
        ([] if rel.startswith("..") else [f":(exclude){rel}"])


def code_commit(out, rev="HEAD", root=ROOT):
    """The last commit at or before `rev` that changed code: anything outside
    the results folder `out` and the documentation (a matrix committed as it
    runs adds commits of its own cells, a sitting commits notes on them; neither
    changes code); `rev` itself where git cannot say."""
    return (_git("log", "-1", "--format=%H", rev, *_outside(out, root), root=root)
            or _git("rev-parse", rev, root=root) or rev)


def cell(out):
    """The code's commit, whether tracked code differs from it (dirty), and
    the machine."""
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                  if line.startswith("model name")), platform.processor())
    return {"commit": code_commit(out),
            "dirty": bool(_git("status", "--porcelain", "--untracked-files=no", *_outside(out))),
            "machine": {"host": platform.node(), "cpus": os.cpu_count(), "cpu": model,
                        "kernel": platform.release()}}
