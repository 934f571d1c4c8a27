#!/usr/bin/env python3
"""Where the machine's CPU went while a benchmark ran: a companion of ../shared/quiet.

    bench/forward/attribute.py [--json FILE] -- COMMAND [ARG...]

Runs COMMAND and prints, on stderr, the machine's busy time (user, nice, system, irq, softirq
of /proc/stat, as `quiet` counts it) split into: COMMAND and the children it waited for;
kernel threads by kind (ksoftirqd: softirq work deferred to its thread; kworker; others);
other processes that lived through the run; and what is left, charged to no task alive at
both ends: processes that started or ended during the run and are not COMMAND's, and (with
tick accounting) softirq and irq work that ran while a CPU was idle, which lands on the idle
task. `quiet` counts everything but the first part as "other work": this says how much of it
was the benchmark's own packets being processed by the kernel outside its processes.
Exit status: COMMAND's.
"""
import json
import os
import resource
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / TICK, v[6] / TICK


def tasks():
    """(pid, tid) -> (comm, is_kernel_thread, cpu seconds) for every thread now."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    s = f.read()
            except OSError:
                continue
            comm = s[s.index("(") + 1 : s.rindex(")")]
            rest = s[s.rindex(")") + 2 :].split()
            ppid, flags = int(rest[1]), int(rest[6])
            kthread = bool(flags & 0x00200000) or ppid == 2 or pid == "2"
            out[(pid, tid)] = (comm, kthread, (int(rest[11]) + int(rest[12])) / TICK)
    return out


def kind(comm, kthread):
    if not kthread:
        return "other processes"
    for k in ("ksoftirqd", "kworker", "napi"):
        if comm.startswith(k):
            return k
    return "other kernel threads"


def main(argv):
    out_json = None
    if argv[:1] == ["--json"]:
        out_json, argv = argv[1], argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 64
    t0, (b0, s0), k0 = time.monotonic(), busy(), tasks()
    rc = subprocess.call(argv)
    t1, (b1, s1), k1 = time.monotonic(), busy(), tasks()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = max(t1 - t0, 1e-9)
    parts = {"command and its children": ru.ru_utime + ru.ru_stime}
    for key, (comm, kth, cpu) in k1.items():
        if key in k0 and key[0] != str(os.getpid()):
            d = cpu - k0[key][2]
            if d > 0:
                k = kind(comm, kth)
                parts[k] = parts.get(k, 0.0) + d
    total = b1 - b0
    parts["not charged to a task alive throughout (exited processes, softirq on an idle CPU)"] = max(total - sum(parts.values()), 0.0)
    cores = {k: round(v / wall, 3) for k, v in parts.items()}
    print(f"attribute: {wall:.1f} s, machine busy {total / wall:.2f} cores (softirq column "
          f"{(s1 - s0) / wall:.2f}); " + "; ".join(f"{k} {v:.2f}" for k, v in cores.items()), file=sys.stderr)
    if out_json:
        with open(out_json, "w") as f:
            json.dump({"wall_s": wall, "busy_cores": total / wall, "softirq_cores": (s1 - s0) / wall,
                       "cores": cores}, f, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
