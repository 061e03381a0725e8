#!/usr/bin/env python3
"""Where an NVML client's resident memory goes (run on the device machine).

1. In fresh interpreters with nothing but ctypes loaded: RSS (anonymous, file, shmem) before
   and after loading libnvidia-ml, nvmlInitWithFlags (0 and NO_ATTACH), the first device handle
   and a GPM sample; the largest mappings after init; the thread count.
2. A running `gpuslack run`: its largest mappings and thread count after 8 s of sampling.

Usage: rss_breakdown.py --bin PATH --out DIR
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "Threads")


def status(pid="self", fields=FIELDS):
    """The given /proc/PID/status fields, each as its first number (kB, or a count)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in fields:
                out[key] = int(value.split()[0])
    return out


def mappings(pid="self", top=12):
    """The mappings with the most resident memory, each with its address range, permissions,
    name, size, resident, anonymous and anonymous-huge-page KiB."""
    rows, current = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                name = head[5] if len(head) > 5 else "[anon]"
                current = {"addr": head[0], "name": name, "size_kib": (hi - lo) // 1024, "rss": 0, "anon": 0, "thp": 0, "perm": head[1]}
                rows.append(current)
            elif head[0] == "Rss:":
                current["rss"] = int(head[1])
            elif head[0] == "Anonymous:":
                current["anon"] = int(head[1])
            elif head[0] == "AnonHugePages:":
                current["thp"] = int(head[1])
    rows.sort(key=lambda r: -r["rss"])
    return rows[:top]


def child(flags):
    steps = [("start", status())]
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    steps.append(("dlopen", status()))
    rc = nvml.nvmlInitWithFlags(ctypes.c_uint(flags))
    steps.append((f"init flags={flags} rc={rc}", status()))
    handle = ctypes.c_void_p()
    rc = nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle))
    steps.append((f"handle rc={rc}", status()))
    power = ctypes.c_uint()
    nvml.nvmlDeviceGetPowerUsage(handle, ctypes.byref(power))
    steps.append(("power read", status()))
    sample = ctypes.c_void_p()
    rc = nvml.nvmlGpmSampleAlloc(ctypes.byref(sample))
    rc2 = nvml.nvmlGpmSampleGet(handle, sample)
    steps.append((f"gpm alloc rc={rc} get rc={rc2}", status()))
    time.sleep(1.0)
    steps.append(("after 1 s", status()))
    print(json.dumps({"steps": steps, "mappings": mappings()}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin")
    ap.add_argument("--out")
    ap.add_argument("--child", type=int)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child)
        return
    os.makedirs(args.out, exist_ok=True)
    lines = []
    for flags in (0, 2):
        res = subprocess.run([sys.executable, __file__, "--child", str(flags)], capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            lines.append(f"child flags={flags} failed: {res.stderr[-2000:]}")
            continue
        data = json.loads(res.stdout)
        lines.append(f"== ctypes NVML client, nvmlInitWithFlags({flags}) ==")
        for name, st in data["steps"]:
            lines.append(f"  {name:<28} " + " ".join(f"{k}={st.get(k)}" for k in FIELDS))
        lines.append("  largest mappings after init (rss KiB, anon KiB, size KiB, perm, name):")
        for m in data["mappings"]:
            lines.append(f"    {m['rss']:>8} {m['anon']:>8} {m['size_kib']:>9} {m['perm']} {m['name']}")
    env = dict(os.environ)
    proc = subprocess.Popen([args.bin, "run", "--seconds", "12", "--interval-ms", "100", "--usage"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    time.sleep(8)
    try:
        st = status(proc.pid)
        maps = mappings(proc.pid, 15)
        lines.append("== gpuslack run at 10 Hz, after 8 s ==")
        lines.append("  " + " ".join(f"{k}={st.get(k)}" for k in FIELDS))
        for m in maps:
            lines.append(f"    {m['rss']:>8} {m['anon']:>8} {m['size_kib']:>9} {m['perm']} {m['name']}")
    except OSError as e:
        lines.append(f"gpuslack run exited early: {e}")
    out, _ = proc.communicate(timeout=30)
    lines.append("  its --usage output:")
    lines.extend("    " + l for l in out.strip().splitlines()[-12:])
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "rss_breakdown.txt"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
