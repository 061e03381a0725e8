"""Labels a recording by Nsight Compute's own rule: FIXTURE_DIR/phases.json (jobs.py) and
FIXTURE_DIR/sol.json (sol.py over ncu.csv) become FIXTURE_DIR/labels.json, and README.md gets the
table of each job's ncu figures and accepted classes.

The rule (h100-everyday/README.md): a unit at or above 60% of its peak binds: ncu's compute (SM)
throughput gives `compute_bound`, its DRAM throughput `memory_bound`. Below 60% on both, Nsight
Compute's "latency issues": `latency_bound`. A band of 5 points each side (55 <= x < 65) accepts both
sides. The memory side is DRAM, not ncu's "Memory Throughput" (the busiest of L1, L2 and DRAM): the
project's memory_bound means DRAM, and h100-everyday's labels read it so (its fp32 GEMM, memory 60%,
DRAM 7%, is compute_bound only). A job that ncu did not profile keeps the `accept` jobs.py gave it,
and its `why` is shown.

Each segment runs from the job's start + 2.0 s to its end - 0.5 s, as h100-everyday's labels.json
does (its segments start 2.00 s after each phase's t0, within 5 ms; --skip-start-s says otherwise).

usage: python3 label.py FIXTURE_DIR [--skip-start-s 2.0] [--skip-end-s 0.5] [--ncu-count 150]
           [--tdp-w W] [--map SOL_KEY=PHASE ...] [--out FILE] [--no-readme] [--check LABELS]
  --check LABELS   compare the classes found with those of an existing labels file (no file is
                   written); exit 1 where they differ
sol.json's keys are matched to phases by name; a key that is no phase's name matches the one phase
whose name holds it (letters and digits only: `fp32gemm` is `fp32_gemm_no_tf32`), else --map."""
import argparse
import json
import os
import re
import sys

LINE = 60.0
BAND = 5.0
BEGIN = "<!-- label.py: the table below is written by scripts/device/busy-jobs/label.py -->"
END = "<!-- label.py: end -->"


class LabelError(Exception):
    """Bad input: the message names the file and the field."""


def classes(compute, dram, line=LINE, band=BAND):
    """Nsight Compute's verdict from its compute and DRAM figures (% of peak): the binding units,
    the higher first, and latency_bound while neither reaches the band's top."""
    bound = [(v, c) for v, c in ((compute, "compute_bound"), (dram, "memory_bound")) if v >= line - band]
    accept = [c for _, c in sorted(bound, key=lambda vc: -vc[0])]
    if max(compute, dram) < line + band:
        accept.append("latency_bound")
    return accept


def load(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise LabelError(f"{path}: cannot read {what}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise LabelError(f"{path}: not JSON (line {e.lineno}, column {e.colno}): {e.msg}") from e


def number(path, where, obj, key):
    v = obj.get(key) if isinstance(obj, dict) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise LabelError(f"{path}: {where}: `{key}` must be a number, got {v!r}")
    return float(v)


def read_phases(path):
    phases = load(path, "the phases")
    if not isinstance(phases, list):
        raise LabelError(f"{path}: must be a list of phases")
    for i, p in enumerate(phases):
        where = f"phase {i}"
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            raise LabelError(f"{path}: {where}: `name` must be a string")
        where = f"phase {i} ({p['name']})"
        t0, t1 = number(path, where, p, "t0"), number(path, where, p, "t1")
        if not t0 < t1:
            raise LabelError(f"{path}: {where}: t0 {t0} must come before t1 {t1}")
        gpus = p.get("gpus", [0])
        if not isinstance(gpus, list) or not gpus or not all(isinstance(g, int) and g >= 0 for g in gpus):
            raise LabelError(f"{path}: {where}: `gpus` must be a list of GPU indices, got {gpus!r}")
        accept = p.get("accept")
        if not isinstance(accept, list) or not accept or not all(isinstance(c, str) for c in accept):
            raise LabelError(f"{path}: {where}: `accept` must be a non-empty list of classes, got {accept!r}")
    return phases


def read_sol(path):
    if not os.path.exists(path):
        return {}
    sol = load(path, "ncu's figures")
    if not isinstance(sol, dict):
        raise LabelError(f"{path}: must map each job to its figures")
    for key, fig in sol.items():
        for field in ("compute", "memory", "dram", "kernels"):
            number(path, f"job {key}", fig, field)
    return sol


def squash(name):
    return re.sub(r"[^a-z0-9]", "", name.lower())


def match(sol, phases, explicit, path):
    """Phase name -> sol.json key."""
    names = [p["name"] for p in phases]
    found = {}
    for key in sol:
        if key in explicit:
            phase = explicit[key]
            if phase not in names:
                raise LabelError(f"--map {key}={phase}: no phase is named {phase}")
        elif key in names:
            phase = key
        else:
            hits = [n for n in names if squash(key) and squash(key) in squash(n)]
            if not hits:  # profiled, but its recording failed or was left out: nothing to label
                print(f"label.py: ncu's `{key}` is no phase's: left out", file=sys.stderr)
                continue
            if len(hits) > 1:
                raise LabelError(f"{path}: job `{key}` matches {len(hits)} phases ({', '.join(hits)}): "
                                 f"say which with --map {key}=PHASE")
            phase = hits[0]
            print(f"label.py: ncu's `{key}` is phase {phase}", file=sys.stderr)
        if phase in found:
            raise LabelError(f"{path}: jobs `{found[phase]}` and `{key}` both match phase {phase}")
        found[phase] = key
    return found


def tdp_of(directory, given):
    if given is not None:
        return given
    path = os.path.join(directory, "samples.facts.json")
    facts = load(path, "the trace's facts (or pass --tdp-w)")
    tdp = (facts.get("spec") or {}).get("tdp_w", {}).get("value")
    if isinstance(tdp, (int, float)) and tdp > 0:
        return float(tdp)
    mw = facts.get("power_limit_default_mw")
    if isinstance(mw, (int, float)) and mw > 0:
        return mw / 1000.0
    raise LabelError(f"{path}: neither spec.tdp_w.value nor power_limit_default_mw: pass --tdp-w")


def label(directory, args):
    phases = read_phases(os.path.join(directory, "phases.json"))
    sol_path = os.path.join(directory, "sol.json")
    sol = read_sol(sol_path)
    kernels_path = os.path.join(directory, "kernels.json")
    per_step = load(kernels_path, "kernels a step") if os.path.exists(kernels_path) else {}
    if not isinstance(per_step, dict) or not all(isinstance(v, dict) for v in per_step.values()):
        raise LabelError(f"{kernels_path}: must map each job to {{\"kernels\": N, ...}}")
    explicit = {}
    for m in args.map:
        key, sep, phase = m.partition("=")
        if not sep or not key or not phase:
            raise LabelError(f"--map {m}: expected SOL_KEY=PHASE")
        explicit[key] = phase
    key_of = match(sol, phases, explicit, sol_path)
    rows, segments = [], []
    for p in phases:
        key = key_of.get(p["name"])
        fig = sol.get(key) if key else None
        if fig and fig["kernels"] > 0:
            accept = classes(fig["compute"], fig["dram"])
            n = int(fig["kernels"])
            whole = (per_step.get(p["name"]) or {}).get("kernels")
            if isinstance(whole, int) and n < whole:
                seen = f"first {n} of {whole} kernels of a step"
            elif not isinstance(whole, int) and n >= args.ncu_count:
                seen = f"{n} kernels, as many as ncu's -c lets through: perhaps part of a step"
            else:
                seen = None
            figures = f"{fig['compute']:.0f} / {fig['memory']:.0f} / {fig['dram']:.0f}"
        else:
            accept = list(p["accept"])
            seen = "ncu did not profile it: " + (p.get("why") or "set from what the job is")
            figures = "–"
        start, end = round(p["t0"] + args.skip_start_s, 2), round(p["t1"] - args.skip_end_s, 2)
        if not start < end:
            print(f"label.py: {p['name']} is too short to label ({p['t1'] - p['t0']:.1f} s)", file=sys.stderr)
            continue
        for gpu in p.get("gpus", [0]):
            segments.append({"gpu": gpu, "start": start, "end": end, "scenario": p["name"], "accept": accept})
        what = p.get("what")
        job = p["name"] + (f" ({what})" if what else "")
        rows.append((job, seen, figures, accept))
    return {"trace": "samples.csv", "tdp_w": tdp_of(directory, args.tdp_w), "segments": segments}, rows


def table(rows):
    lines = [BEGIN, "",
             "How the labels were set: where ncu profiled the job, by Nsight Compute's own rule. A unit (ncu's",
             "compute, or DRAM) at or above 60% of its peak binds: `compute_bound` or `memory_bound`. Below 60%",
             "on both, \"latency issues\": `latency_bound`. From 55% to under 65% both sides are accepted.",
             "Elsewhere, from what the job is (its reason in the table).", "",
             "| job | ncu compute / memory / DRAM (% of peak) | accepted |", "|---|---|---|"]
    for job, seen, figures, accept in rows:
        cell = job + (f"; {seen}" if seen else "")
        lines.append(f"| {cell} | {figures} | {', '.join(accept)} |")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def write_readme(directory, rows):
    path = os.path.join(directory, "README.md")
    block = table(rows)
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
        if BEGIN in text and END in text:
            text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END) + 1:]
        else:
            text = text.rstrip("\n") + "\n\n" + block
    else:
        name = os.path.basename(os.path.abspath(directory))
        facts = {}
        if os.path.exists(os.path.join(directory, "samples.facts.json")):
            facts = load(os.path.join(directory, "samples.facts.json"), "the trace's facts")
        gpu = facts.get("name", "GPU")
        driver = f" (driver {facts['driver']})" if facts.get("driver") else ""
        text = (f"# {name}\n\n"
                f"{len(rows)} jobs one after another on one {gpu}{driver}, recorded with `gpuslack record "
                "--interval-ms 100` around `python3 jobs.py OUT` (scripts/device/busy-jobs/run.sh record), "
                "each with Nsight Compute's speed-of-light of one warmed-up step as its truth (run.sh ncu).\n\n"
                "| file | what |\n|---|---|\n"
                "| `samples.csv`, `samples.facts.json` | the trace and its facts |\n"
                "| `phases.json`, `jobs.log` | each job's start, end, steps and achieved rate |\n"
                "| `jobs.py` | the jobs |\n"
                "| `sol_jobs.py`, `ncu.csv`, `sol.json` | the truth: `ncu --profile-from-start off --clock-control "
                "none --section SpeedOfLight -c 150 --csv python3 sol_jobs.py JOB` on one warmed-up step of "
                "each job, weighted by kernel duration with `sol.py` |\n"
                "| `kernels.json` | kernels and GPU time in one step of each job (torch.profiler), to tell "
                "whether ncu's -c saw a whole step |\n"
                "| `labels.json` | each job's accepted classes (written by label.py) |\n"
                "| `doctor.txt` | `gpuslack doctor` on that machine |\n\n") + block
    with open(path, "w") as f:
        f.write(text)


def check(labels, path):
    """Differences between the classes found and those of an existing labels file, by scenario."""
    old = load(path, "the labels to compare with")
    theirs = {s["scenario"]: s for s in old.get("segments", [])}
    diffs = []
    for s in labels["segments"]:
        t = theirs.get(s["scenario"])
        if t is None:
            diffs.append(f"{s['scenario']}: not in {path}")
            continue
        if set(t["accept"]) != set(s["accept"]):
            diffs.append(f"{s['scenario']}: {path} accepts {sorted(t['accept'])}, ncu's rule {sorted(s['accept'])}")
        if abs(t["start"] - s["start"]) > 0.011 or abs(t["end"] - s["end"]) > 0.011:
            diffs.append(f"{s['scenario']}: bounds {t['start']}..{t['end']} there, {s['start']}..{s['end']} here")
    return diffs


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory")
    ap.add_argument("--skip-start-s", type=float, default=2.0)
    ap.add_argument("--skip-end-s", type=float, default=0.5)
    ap.add_argument("--ncu-count", type=int, default=150, help="ncu's -c: a job with as many kernels saw part of a step")
    ap.add_argument("--tdp-w", type=float)
    ap.add_argument("--map", action="append", default=[], metavar="SOL_KEY=PHASE")
    ap.add_argument("--out")
    ap.add_argument("--no-readme", action="store_true")
    ap.add_argument("--check", metavar="LABELS")
    args = ap.parse_args(argv)
    try:
        labels, rows = label(args.directory, args)
        if args.check:
            diffs = check(labels, args.check)
            print(table(rows), end="")
            for d in diffs:
                print("differs:", d)
            return 1 if diffs else 0
        out = args.out or os.path.join(args.directory, "labels.json")
        with open(out, "w") as f:
            json.dump(labels, f, indent=1)
            f.write("\n")
        if not args.no_readme:
            write_readme(args.directory, rows)
        print(table(rows), end="")
        return 0
    except LabelError as e:
        print(f"label.py: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"label.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
