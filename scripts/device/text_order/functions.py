#!/usr/bin/env python3
"""The executable's functions for entry_trace.c, and LLD's symbol ordering from its traces.

  functions.py list BINARY > functions.txt
      the hex offset of every function with a size (from an unstripped build's symbol table)
  functions.py order BINARY TRACE... > link/symbol-order.txt
      the names of the functions that ran: the first trace's in the order they first ran, then
      those new in the second, and so on, each group under a comment naming its trace; prints
      to stderr how much code each group adds
  functions.py check BINARY ORDER_FILE
      how many of the first group's names (the agent's) BINARY still has; exits 1 under 95%
  functions.py rebase BINARY ORDER_FILE
      rewrites ORDER_FILE: the same functions under BINARY's names, without a GPU: a new
      compiler, profile, dependency version or type changes the hashes in symbol names, not
      the paths they spell; a name whose path now has several hashes (generic instances)
      brings all of them, and one not found stays, for `check` to count
"""
import os
import re
import subprocess
import sys

# Under this share of the agent's functions found, the ordering no longer packs the agent.
FRESH_ENOUGH = 0.95


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


def names_in(binary):
    """Every function name in BINARY."""
    return {name for _, names in functions(binary).values() for name in names}


def order(binary, traces):
    table = functions(binary)
    print("# LLD --symbol-ordering-file (build.rs): the functions the agent runs, packed together")
    print("# at the start of .text. Written by scripts/device/text_order (see README.md there).")
    placed = set()
    written = set()  # a local function may have copies, under one name, in several crates
    code = 0
    for trace in traces:
        with open(trace) as f:
            first_ms = {int(offset, 16): float(ms) for offset, ms in map(str.split, f)}
        new = sorted(first_ms.keys() - placed, key=first_ms.get)
        placed.update(new)
        code += sum(table[o][0] for o in new)
        print(f"# group: {os.path.basename(trace)}")
        for name in (name for offset in new for name in table[offset][1]):
            if name not in written:
                written.add(name)
                print(name)
        print(f"{trace}: {len(placed)} functions so far, {code / 1024:.0f} KiB", file=sys.stderr)
    total = sum(size for size, _ in table.values())
    print(f"of {len(table)} functions, {total / 1024:.0f} KiB", file=sys.stderr)


def check(binary, order_file):
    names = names_in(binary)
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
                 "longer packed and its memory grows by ~2 MiB. After a compiler, profile, type or "
                 "dependency change, `functions.py rebase` renames it without a GPU; after new "
                 "code, trace it again (scripts/device/text_order/README.md)")


def paths(names):
    """{name: the path it spells}: demangled by c++filt (binutils, beside readelf), without
    what a rebuild may change: the legacy scheme's `::h<hash>` tail and the v0 scheme's crate
    disambiguators (`[hash]`)."""
    names = list(names)
    out = subprocess.run(["c++filt"], input="\n".join(names), check=True, capture_output=True,
                         text=True).stdout.splitlines()
    return {name: re.sub(r"::h[0-9a-f]{16}$|\[[0-9a-f]+\]", "", path)
            for name, path in zip(names, out)}


def rebase(binary, order_file):
    names = names_in(binary)
    by_path = {}
    for name, path in paths(names).items():
        by_path.setdefault(path, []).append(name)
    with open(order_file) as f:
        lines = [line.strip() for line in f]
    old_paths = paths(line for line in lines if line and not line.startswith("#"))
    kept = renamed = lost = 0
    out = []
    for line in lines:
        if not line or line.startswith("#"):
            out.append(line)
        elif line in names:
            out.append(line)
            kept += 1
        elif old_paths[line] in by_path:
            out += sorted(by_path[old_paths[line]])
            renamed += 1
        else:
            out.append(line)  # kept, so that `check` still counts it missing; LLD skips it
            lost += 1
    seen = set()
    with open(order_file, "w") as f:
        for line in out:
            if line.startswith("#") or line not in seen:
                seen.add(line)
                f.write(line + "\n")
    print(f"{order_file}: {kept} names kept, {renamed} found under new names, {lost} not found",
          file=sys.stderr)


def main():
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "list":
        for offset in sorted(functions(args[1])):
            print(f"{offset:x}")
    elif len(args) >= 3 and args[0] == "order":
        order(args[1], args[2:])
    elif len(args) == 3 and args[0] == "check":
        check(args[1], args[2])
    elif len(args) == 3 and args[0] == "rebase":
        rebase(args[1], args[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
