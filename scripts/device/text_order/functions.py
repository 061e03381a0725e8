#!/usr/bin/env python3
"""The executable's functions for entry_trace.c, and LLD's symbol ordering from its traces.

  functions.py list BINARY > functions.txt
      the hex offset of every function with a size (from an unstripped build's symbol table)
  functions.py order BINARY TRACE... > link/symbol-order.txt
      the names of the functions that ran: the first trace's in the order they first ran, then
      those new in the second, and so on, each group under a comment naming its trace; prints
      to stderr how much code each group adds
  functions.py check BINARY ORDER_FILE
      how many of the first group's names (the agent's) BINARY still has; exits 1 under 90%
"""
import os
import subprocess
import sys

# Under this share of the agent's functions found, the ordering no longer packs the agent.
FRESH_ENOUGH = 0.90


def functions(binary):
    """{offset: (size, [names])} of the functions in `readelf -sW BINARY`."""
    out = subprocess.run(["readelf", "-sW", binary], check=True, capture_output=True, text=True)
    table = {}
    for line in out.stdout.splitlines():
        fields = line.split()
        if len(fields) < 8 or fields[3] != "FUNC" or fields[6] == "UND":
            continue
        offset, size, name = int(fields[1], 16), int(fields[2], 0), fields[7]
        if size == 0:
            continue
        entry = table.setdefault(offset, (size, []))
        if name not in entry[1]:
            entry[1].append(name)
    return table


def order(binary, traces):
    table = functions(binary)
    print("# LLD --symbol-ordering-file (build.rs): the functions the agent runs, packed together")
    print("# at the start of .text. Written by scripts/device/text_order (see README.md there).")
    placed = set()
    code = 0
    for trace in traces:
        with open(trace) as f:
            first_ms = {int(offset, 16): float(ms) for offset, ms in map(str.split, f)}
        new = sorted(first_ms.keys() - placed, key=first_ms.get)
        placed.update(new)
        code += sum(table[o][0] for o in new)
        print(f"# group: {os.path.basename(trace)}")
        print("\n".join(name for offset in new for name in table[offset][1]))
        print(f"{trace}: {len(placed)} functions so far, {code / 1024:.0f} KiB", file=sys.stderr)
    total = sum(size for size, _ in table.values())
    print(f"of {len(table)} functions, {total / 1024:.0f} KiB", file=sys.stderr)


def check(binary, order_file):
    names = {name for _, names in functions(binary).values() for name in names}
    groups = []
    with open(order_file) as f:
        for line in map(str.strip, f):
            if line.startswith("# group:"):
                groups.append([])
            elif line and not line.startswith("#") and groups:
                groups[-1].append(line)
    if not groups:
        sys.exit(f"{order_file}: no '# group:' line; regenerate it (scripts/device/text_order)")
    agent = groups[0]
    found = sum(name in names for name in agent)
    share = found / len(agent)
    print(f"{order_file}: {found} of the agent's {len(agent)} functions are in {binary} "
          f"({share:.1%})")
    if share < FRESH_ENOUGH:
        sys.exit(f"{order_file} is stale (under {FRESH_ENOUGH:.0%}): the agent's code is no "
                 "longer packed and its memory grows by ~2 MiB; regenerate it on a GPU machine "
                 "as scripts/device/text_order/README.md says")


def main():
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "list":
        for offset in sorted(functions(args[1])):
            print(f"{offset:x}")
    elif len(args) >= 3 and args[0] == "order":
        order(args[1], args[2:])
    elif len(args) == 3 and args[0] == "check":
        check(args[1], args[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
