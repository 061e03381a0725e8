#!/usr/bin/env python3
"""Does transparent huge page promotion inflate an NVML client's RSS? (run on the device machine)

For a bare ctypes NVML client and for `gpuslack run` at 10 Hz, with and without
prctl(PR_SET_THP_DISABLE) set before NVML is loaded: VmRSS, VmHWM and, for the largest
mappings, Rss and AnonHugePages (KiB throughout). Also the PT_LOAD segments of libnvidia-ml (is
the big anonymous block its .bss?).

Usage: rss_thp.py --bin PATH --out DIR
"""
import argparse
import ctypes
import json
import os
import struct
import subprocess
import sys
import time

import rss_breakdown

PR_SET_THP_DISABLE = 41


def thp_off():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl")


def status(pid="self"):
    return rss_breakdown.status(pid, ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads", "THP_enabled"))


def mappings(pid="self", top=8):
    return rss_breakdown.mappings(pid, top)


def fmt_maps(rows):
    return ["    rss=%6d thp=%6d size=%6d %s %s %s" % (m["rss"], m["thp"], m["size_kib"], m["perm"], m["addr"], m["name"]) for m in rows]


def child(disable, flags):
    if disable:
        thp_off()
    lines = [f"  start {status()}"]
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    rc = nvml.nvmlInitWithFlags(ctypes.c_uint(flags))
    lines.append(f"  init flags={flags} rc={rc} {status()}")
    handle = ctypes.c_void_p()
    rc = nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle))
    power = ctypes.c_uint()
    rc2 = nvml.nvmlDeviceGetPowerUsage(handle, ctypes.byref(power))
    lines.append(f"  handle rc={rc} power rc={rc2} {power.value} mW {status()}")
    lines.extend(fmt_maps(mappings()))
    print("\n".join(lines))


def elf_loads(path):
    with open(path, "rb") as f:
        data = f.read(1 << 16)
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    out = []
    for i in range(phnum):
        p_type, p_flags, p_offset, p_vaddr, _, p_filesz, p_memsz, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
        if p_type == 1:
            out.append(f"  LOAD flags={p_flags} vaddr={p_vaddr:#x} filesz={p_filesz // 1024} KiB memsz={p_memsz // 1024} KiB (bss {(p_memsz - p_filesz) // 1024} KiB)")
    return out


def run_gpuslack(binary, disable):
    pre = thp_off if disable else None
    proc = subprocess.Popen([binary, "run", "--seconds", "12", "--interval-ms", "100", "--usage"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=pre)
    time.sleep(9)
    lines = [f"  {status(proc.pid)}"] + fmt_maps(mappings(proc.pid))
    out, _ = proc.communicate(timeout=30)
    lines.extend("  | " + l for l in out.strip().splitlines()[-4:])
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin")
    ap.add_argument("--out")
    ap.add_argument("--child", nargs=2, type=int)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    os.makedirs(args.out, exist_ok=True)
    lines = [f"kernel {os.uname().release}"]
    for name in ("enabled", "defrag", "khugepaged/defrag", "khugepaged/max_ptes_none"):
        try:
            with open(f"/sys/kernel/mm/transparent_hugepage/{name}") as f:
                lines.append(f"thp {name}: {f.read().strip()}")
        except OSError as e:
            lines.append(f"thp {name}: {e}")
    lib = os.path.realpath(subprocess.run(["sh", "-c", "ldconfig -p | grep 'libnvidia-ml.so.1 ' | head -1 | awk '{print $NF}'"], capture_output=True, text=True).stdout.strip() or "/usr/local/nvidia/lib64/libnvidia-ml.so.1")
    lines.append(f"{lib}:")
    lines.extend(elf_loads(lib))
    for disable, flags in ((0, 0), (1, 0), (0, 2)):
        lines.append(f"== ctypes client, THP disabled={disable}, init flags={flags}")
        res = subprocess.run([sys.executable, __file__, "--child", str(disable), str(flags)], capture_output=True, text=True, timeout=60)
        lines.append(res.stdout.rstrip())
        if res.returncode != 0:
            lines.append(f"  exit {res.returncode}: {res.stderr[-1500:]}")
    if args.bin:
        for disable in (0, 1):
            lines.append(f"== gpuslack run 10 Hz, THP disabled={disable}")
            lines.extend(run_gpuslack(args.bin, disable))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "rss_thp.txt"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
