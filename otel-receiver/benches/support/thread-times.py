#!/usr/bin/env python3
"""CPU time of each thread of a command, for a pipeline whose wall time is set by its busiest
thread. Runs the command, reads /proc/PID/task/*/schedstat (nanoseconds on a CPU, and waiting
to get one) every few milliseconds, and prints, per thread in the order they started: its time
on a CPU, its time runnable but waiting, and its share of the command's wall time. A thread's
last reading is from the poll before it ended, so a thread shorter than the poll is missed.

Usage: thread-times.py OUT_FILE -- COMMAND... ; the command's stdout goes to /dev/null, its
stderr to ours, the table to OUT_FILE and stdout. Pin the poller away from the command's cores
(taskset) so that it takes none of their time.
"""
import os
import subprocess
import sys
import time


def main():
    out_path = sys.argv[1]
    if sys.argv[2] != "--":
        sys.exit("usage: thread-times.py OUT_FILE -- COMMAND...")
    command = sys.argv[3:]
    started = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    seen = {}  # tid -> (order, comm, on_cpu_ns, waiting_ns)
    while child.poll() is None:
        task_dir = f"/proc/{child.pid}/task"
        try:
            tids = os.listdir(task_dir)
        except FileNotFoundError:
            break
        for tid in tids:
            try:
                with open(f"{task_dir}/{tid}/schedstat") as f:
                    on_cpu, waiting, _ = f.read().split()
                with open(f"{task_dir}/{tid}/comm") as f:
                    comm = f.read().strip()
            except (FileNotFoundError, ProcessLookupError, ValueError):
                continue
            order = seen.get(tid, (len(seen),))[0]
            seen[tid] = (order, comm, int(on_cpu), int(waiting))
        time.sleep(0.002)
    wall_s = time.monotonic() - started
    lines = [f"{' '.join(command)}", f"wall {wall_s:.3f} s, exit {child.returncode}"]
    total = 0.0
    for tid, (order, comm, on_cpu, waiting) in sorted(seen.items(), key=lambda kv: kv[1][0]):
        on_s, wait_s = on_cpu / 1e9, waiting / 1e9
        total += on_s
        lines.append(
            f"thread {order} ({comm}, {tid}): {on_s:.3f} s on a CPU ({on_s / wall_s:.0%} of the wall),"
            f" {wait_s:.3f} s runnable and waiting"
        )
    lines.append(f"all threads: {total:.3f} s on a CPU, {total / wall_s:.2f} cores busy on average")
    text = "\n".join(lines) + "\n"
    with open(out_path, "a") as f:
        f.write(text)
    sys.stdout.write(text)
    sys.exit(child.returncode)


if __name__ == "__main__":
    main()
