"""One job of jobs.py (the same code: it is imported), warmed up, then ONE step between
cudaProfilerStart and cudaProfilerStop, for Nsight Compute's speed-of-light:
  ncu --profile-from-start off --clock-control none --section SpeedOfLight -c 150 --csv python3 sol_jobs.py JOB

usage: python3 sol_jobs.py JOB                   profile one step of JOB (run under ncu)
       python3 sol_jobs.py --list                the jobs' names, one a line
       python3 sol_jobs.py --count OUT [JOB...]  kernels and GPU time of one step of each job (or
                                                 those named), by torch.profiler, to OUT as JSON; not
                                                 under ncu: it says whether ncu's -c saw a whole step"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jobs  # noqa: E402  (beside this file; imported after the path is set)

WARMUP_STEPS = 3


def warmed(job):
    step, _ = job.build()
    for _ in range(WARMUP_STEPS):
        step()
    jobs.sync()
    return step


def profile_one(name):
    step = warmed(jobs.BY_NAME[name])
    on_gpu = jobs.DEV == "cuda"  # off the GPU (BUSY_JOBS_DEVICE=cpu), only the code is tried
    if on_gpu:
        torch.cuda.profiler.start()
    step()
    jobs.sync()
    if on_gpu:
        torch.cuda.profiler.stop()


def count(out, names):
    """Kernels in one warmed-up step of each job, as CUPTI sees them (copies and memsets apart: ncu
    profiles kernels only), and their summed time."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    # Off the GPU (BUSY_JOBS_DEVICE=cpu, for trying the code) the CPU's operators are counted.
    activity, device = ((ProfilerActivity.CUDA, DeviceType.CUDA) if jobs.DEV == "cuda"
                        else (ProfilerActivity.CPU, DeviceType.CPU))
    result = {}
    for name in names:
        started = time.time()
        step = None
        try:
            step = warmed(jobs.BY_NAME[name])
            with profile(activities=[activity]) as prof:
                step()
                jobs.sync()
            kernels = [e for e in prof.events() if e.device_type == device
                       and not e.name.startswith(("Memcpy", "Memset"))]
            result[name] = {"kernels": len(kernels),
                            "gpu_us": round(sum(e.time_range.elapsed_us() for e in kernels), 1)}
        except Exception as err:  # one job's failure leaves the others' counts
            result[name] = {"error": f"{err!r:.300}"}
        del step
        jobs.release()
        print(f"{name:30s} {result[name]} ({time.time() - started:.1f} s)", file=sys.stderr, flush=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


def main():
    args = sys.argv[1:]
    if args == ["--list"]:
        print("\n".join(j.name for j in jobs.JOBS))
    elif len(args) >= 2 and args[0] == "--count":
        names = args[2:] or [j.name for j in jobs.JOBS]
        unknown = [n for n in names if n not in jobs.BY_NAME]
        if unknown:
            sys.exit(f"sol_jobs.py: unknown jobs {unknown}; known: {sorted(jobs.BY_NAME)}")
        count(args[1], names)
    elif len(args) == 1 and args[0] in jobs.BY_NAME:
        profile_one(args[0])
    else:
        sys.exit(__doc__ + f"\njobs: {', '.join(j.name for j in jobs.JOBS)}")


if __name__ == "__main__":
    main()
