"""Backends start, signal and reap the processes the supervisor plans; they
never decide argv (plan.py does, once for every backend).

  local  child processes of the launcher, each in its own session with
         PR_SET_PDEATHSIG=SIGKILL (they die with the launcher, even by -9),
         output to <out_dir>/<name>.log, events read from their file.
  ssh    `ssh HOST <command>` per process (ssh.command in the spec, e.g.
         `ip netns exec {host}` for namespaces); slurm: `srun --nodes=1
         --ntasks=1 --nodelist=HOST --overlap <command>` per process, a step
         of the allocation. Both run the process under a tiny POSIX sh
         watchdog (WATCHDOG below): stdin is the launcher's control channel
         (a line "STOP", "CONT", "TERM" or "KILL" signals the process; end of
         file, i.e. the launcher or its ssh/srun died, TERMs it and KILLs it
         10 s later), stdout carries the process's pid and then its events
         (tail -F of its events file), stderr its output (to the local log).

Every process carries RELAXPS_JOB_TAG=<tag> in its environment; sweep(host)
kills whatever still carries it there (proctools.py)."""
import os
import shlex
import signal
import subprocess

from relaxps_launch import proctools
from relaxps_launch.events import LineReader, StreamReader

# $1: the events file; the rest: the process's argv.
WATCHDOG = r'''ev=$1; shift
exec 3<&0
mkdir -p "$(dirname "$ev")" && : >>"$ev" || exit 126
seen=$(wc -c <"$ev")
"$@" </dev/null 1>&2 3<&- &
child=$!
echo "RELAXPS_PID $child"
tail -c +$((seen + 1)) -F --pid=$child "$ev" 2>/dev/null &
tailer=$!
(while read -r sig <&3; do kill -s "$sig" $child 2>/dev/null; done
 kill -s CONT $child 2>/dev/null; kill -s TERM $child 2>/dev/null
 sleep 10 & nap=$!
 trap 'kill $nap 2>/dev/null; exit 0' TERM
 wait $nap
 kill -s KILL $child 2>/dev/null) &
guard=$!
wait $child
rc=$?
wait $tailer
kill $guard 2>/dev/null
exit $rc
'''

with open(proctools.__file__, encoding="utf-8") as _f:
    PROCTOOLS_SOURCE = _f.read()


def exit_status(returncode):
    """A shell's view of an exit: 128+N for a death by signal N."""
    if returncode is None:
        return None
    return 128 - returncode if returncode < 0 else returncode


class Handle:
    """One started process: poll(), signal(sig), read_events()."""

    def __init__(self, popen, events, pid=None):
        self.popen = popen
        self.events = events
        self.pid = pid if pid is not None else popen.pid

    def poll(self):
        return exit_status(self.popen.poll())


class LocalBackend:
    name = "local"

    def __init__(self, env):
        self.env = env  # The environment every process gets (tag included).

    def workdir(self, host, spec_out_dir, tag):
        return host.workdir or spec_out_dir

    def prepare(self, host, workdir):
        os.makedirs(workdir, exist_ok=True)

    def put_file(self, host, path, data, mode=0o600):
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    def start(self, host, argv, env, log_path, events_path):
        events = LineReader(events_path)  # Before the process can write.
        log = open(log_path, "ab")
        try:
            p = subprocess.Popen(argv, env=dict(self.env, **env), stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT,
                                 preexec_fn=proctools.pdeathsig)
        finally:
            log.close()
        return Handle(p, events)

    def signal(self, handle, sig):
        try:
            os.kill(handle.pid, sig)
        except ProcessLookupError:
            pass

    def run(self, host, argv, input_data=None, timeout=30):
        return subprocess.run(argv, input=input_data, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout)

    def spawn(self, host, argv):
        """A short command (relaxps-ctl) started, not waited for: a Popen
        with its output in pipes (read once it exited)."""
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, preexec_fn=proctools.pdeathsig)

    def sweep(self, host, tag):
        return proctools.sweep(tag)

    def tcp_ports(self, host, handle):
        return proctools.tcp_ports(handle.pid)

    def close(self, handle):
        pass


class RemoteBackend:
    """ssh and slurm: a command prefix per host, the watchdog on the far side."""

    def __init__(self, kind, prefix, env, shell=True):
        self.name = kind
        self._prefix = prefix  # ssh: a template with "{host}"; slurm: the srun argv.
        self._shell = shell    # ssh: the prefix runs one command line in a shell.
        self.env = env         # Variables every remote process gets (the tag among them).

    def workdir(self, host, spec_out_dir, tag):
        if host.workdir:
            return host.workdir
        # Slurm: the run folder is on the filesystem the nodes share.
        return spec_out_dir if self.name == "slurm" else f"/tmp/relaxps-{tag}"

    def _argv(self, host, argv):
        if self.name == "slurm":
            return self._prefix + ["--nodes=1", "--ntasks=1", f"--nodelist={host.name}",
                                   "--overlap", "--kill-on-bad-exit=0"] + argv
        prefix = [a.replace("{host}", host.name) for a in self._prefix]
        if self._shell:
            # ssh joins its arguments into one line for the remote shell.
            return prefix + [shlex.join(argv)]
        return prefix + argv

    def _env_argv(self, env):
        return ["env"] + [f"{k}={v}" for k, v in sorted(dict(self.env, **env).items())]

    def run(self, host, argv, input_data=None, timeout=60):
        return subprocess.run(self._argv(host, argv), input=input_data, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout)

    def spawn(self, host, argv):
        return subprocess.Popen(self._argv(host, argv), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=proctools.pdeathsig)

    def prepare(self, host, workdir):
        r = self.run(host, ["mkdir", "-p", workdir], input_data=b"")
        if r.returncode != 0:
            raise OSError(f"cannot reach {host.name} ({shlex.join(self._argv(host, ['true']))}): "
                          f"{r.stderr.decode(errors='replace').strip()[-200:]}")

    def put_file(self, host, path, data, mode=0o600):
        script = (f"umask 077; mkdir -p {shlex.quote(os.path.dirname(path))} && "
                  f"cat >{shlex.quote(path)} && chmod {mode:o} {shlex.quote(path)}")
        r = self.run(host, ["sh", "-c", script], input_data=data)
        if r.returncode != 0:
            raise OSError(f"cannot write {path} on {host.name}: "
                          f"{r.stderr.decode(errors='replace').strip()[-200:]}")

    def start(self, host, argv, env, log_path, events_path):
        full = self._env_argv(env) + ["/bin/sh", "-c", WATCHDOG, "relaxps-watchdog",
                                      events_path] + argv
        log = open(log_path, "ab")
        try:
            p = subprocess.Popen(self._argv(host, full), stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=log,
                                 preexec_fn=proctools.pdeathsig)
        finally:
            log.close()
        return RemoteHandle(p)

    def signal(self, handle, sig):
        name = signal.Signals(sig).name[3:]
        try:
            handle.popen.stdin.write(f"{name}\n".encode())
            handle.popen.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def sweep(self, host, tag):
        r = self.run(host, ["/usr/bin/python3", "-c", PROCTOOLS_SOURCE, "sweep", tag])
        return [int(p) for p in r.stdout.split()] if r.returncode == 0 else []

    def tcp_ports(self, host, handle):
        if handle.pid is None:
            return []
        r = self.run(host, ["/usr/bin/python3", "-c", PROCTOOLS_SOURCE, "ports",
                            str(handle.pid)])
        return [int(p) for p in r.stdout.split()] if r.returncode == 0 else []

    def close(self, handle):
        try:
            handle.popen.stdin.close()
        except OSError:
            pass


class RemoteHandle(Handle):
    """The watchdog's stdout: "RELAXPS_PID N", then the process's events."""

    def __init__(self, popen):
        self._stream = StreamReader(popen.stdout.fileno())
        super().__init__(popen, self, pid=None)

    def read(self):
        lines = []
        for line in self._stream.read():
            if line.startswith("RELAXPS_PID "):
                self.pid = int(line.split()[1])
            else:
                lines.append(line)
        return lines


def make(spec, env):
    if spec.backend == "local":
        return LocalBackend(env)
    if spec.backend == "ssh":
        return RemoteBackend("ssh", spec.ssh_command, env, spec.ssh_shell)
    return RemoteBackend("slurm", spec.srun_command, env)
