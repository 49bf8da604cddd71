"""The small go-between that measures one command: Linux carries a process's peak RSS across fork
and exec, so a child forked straight from a large benchmark process would report at least that
process's peak. The go-between is small, forks the command and writes the command's own rusage
(wall seconds, peak RSS, CPU, exit code) as JSON to the file named by its first argument.

Run as `python -I -S -c GO_BETWEEN REPORT CMD...`. Standard library only: both benchmark drivers
import it, and the peers' driver never imports Dagster."""

GO_BETWEEN = (
    "import json, os, subprocess, sys, time\n"
    "started = time.perf_counter()\n"
    "proc = subprocess.Popen(sys.argv[2:])\n"
    "_pid, status, usage = os.wait4(proc.pid, 0)\n"
    "with open(sys.argv[1], 'w') as f:\n"
    "    json.dump({'seconds': time.perf_counter() - started, 'maxrss_kb': usage.ru_maxrss,\n"
    "               'cpu': usage.ru_utime + usage.ru_stime, 'code': os.waitstatus_to_exitcode(status)}, f)\n"
)
