"""relaxps-launch: runs a relaxps job from one JSON spec on a backend (local
child processes, ssh hosts, or srun steps inside a Slurm allocation), owns
every process it starts and writes summary.json. See docs/launch.md."""
