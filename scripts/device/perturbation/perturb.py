#!/usr/bin/env python3
"""Does the agent slow the tokens down? (issue #28)

On GPU 0, in rounds, each mode once per round in a shuffled order (so drift hits every mode
alike), one *run* per mode: the sampler process (if any) is started, given `--settle-s` to open
NVML and take its first tick, then three workloads run one after another and the sampler is
stopped:

- decode, CUDA graph: a GPT-like stack (random bf16 weights, 24 layers, d_model 2048, 16 heads,
  batch 1, a fixed 1024-token KV cache written round-robin, so every token costs the same),
  one graph replay per token, `torch.cuda.synchronize()` per token; inter-token latency (ITL) is
  the host time between two tokens' completions. GPU-bound (the weights are read once a token),
  the form a serving engine runs;
- decode, eager: the same step launched op by op from Python: bound by the host's launches;
- training: ResNet-50 (torchvision, no weights), batch 128, channels-last, bf16 autocast, SGD
  with momentum, random data already on the GPU; a fixed number of steps, steps/s over them.

Modes (`--modes`): off; agent_default (`gpuslack run` at its default, the adaptive cadence:
1 s, 100 ms for 6 s after a trigger); agent_10hz (`--interval-ms 100`); agent_1hz
(`--interval-ms 1000`); agent_10hz_nogpm (`--interval-ms 100 --no-gpm`); and probes that call one NVML
function on a fixed grid from a separate process (nvml_probe.py), for the calls no gpuslack flag
can switch off: probe_energy, probe_pcie, probe_procutil, probe_gpm (each at 10 Hz unless the
mode name ends in _Nhz). Every agent serves Prometheus on 127.0.0.1 (never scraped during a
run) and prints its CPU use at exit (`--usage`).

Writes OUT/perturb.json after every round (per run: per-token latencies in µs, the percentiles,
steps/s, the sampler's exit code); analyze.py turns it into the table.
Usage: perturb.py --bin PATH/gpuslack --out DIR [--rounds N] [--deadline-s S] ...
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))

ap = argparse.ArgumentParser()
ap.add_argument("--bin", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--rounds", type=int, default=10, help="at least this many rounds")
ap.add_argument("--max-rounds", type=int, default=40)
ap.add_argument("--deadline-s", type=float, default=540.0,
                help="start no round (beyond --rounds) that would end later than this, from start")
ap.add_argument("--hard-deadline-s", type=float, default=560.0,
                help="start no round that would end later than this, even short of --rounds")
ap.add_argument("--settle-s", type=float, default=0.7)
ap.add_argument("--graph-s", type=float, default=1.5)
ap.add_argument("--eager-s", type=float, default=1.5)
ap.add_argument("--train-s", type=float, default=2.0, help="training steps are fixed to take about this long")
ap.add_argument("--warmup-s", type=float, default=4.0)
ap.add_argument("--modes", default="off,agent_default,agent_1hz,agent_10hz_nogpm")
ap.add_argument("--seed", type=int, default=28)
ap.add_argument("--smoke", action="store_true", help="also scrape each agent once after its run")
args = ap.parse_args()

T_START = time.time()
os.makedirs(args.out, exist_ok=True)
dev = torch.device("cuda:0")
torch.manual_seed(0)
log = open(os.path.join(args.out, "samplers.log"), "a")


def say(*a):
    print(f"[{time.time() - T_START:7.1f}s]", *a, flush=True)


# ---------------------------------------------------------------------------------------------
# decode: a GPT-like stack with a fixed-length KV cache


class Decoder:
    def __init__(self, layers=24, d=2048, heads=16, ctx=1024, vocab=32000, batch=1):
        self.L, self.d, self.H, self.hd, self.ctx, self.B = layers, d, heads, d // heads, ctx, batch
        bf = dict(device=dev, dtype=torch.bfloat16)
        s = 0.02
        self.emb = torch.randn(vocab, d, **bf) * s
        self.lm = torch.randn(d, vocab, **bf) * s
        self.w = []
        for _ in range(layers):
            self.w.append(dict(
                ln1=torch.ones(d, **bf), ln1b=torch.zeros(d, **bf),
                qkv=torch.randn(d, 3 * d, **bf) * s, o=torch.randn(d, d, **bf) * s,
                ln2=torch.ones(d, **bf), ln2b=torch.zeros(d, **bf),
                up=torch.randn(d, 4 * d, **bf) * s, down=torch.randn(4 * d, d, **bf) * s,
                # never zeros: random keys and values stand for an earlier context
                k=torch.randn(batch, heads, ctx, self.hd, **bf),
                v=torch.randn(batch, heads, ctx, self.hd, **bf)))
        self.lnf, self.lnfb = torch.ones(d, **bf), torch.zeros(d, **bf)
        self.tok = torch.randint(0, vocab, (batch,), device=dev)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.graph = None

    @torch.no_grad()
    def step(self):
        B, d, H, hd = self.B, self.d, self.H, self.hd
        x = self.emb[self.tok]
        for w in self.w:
            h = F.layer_norm(x, (d,), w["ln1"], w["ln1b"])
            q, k, v = (h @ w["qkv"]).view(B, 3, H, hd).unbind(1)
            w["k"].index_copy_(2, self.pos, k.unsqueeze(2))
            w["v"].index_copy_(2, self.pos, v.unsqueeze(2))
            a = F.scaled_dot_product_attention(q.unsqueeze(2), w["k"], w["v"])
            x = x + a.reshape(B, d) @ w["o"]
            h = F.layer_norm(x, (d,), w["ln2"], w["ln2b"])
            x = x + F.gelu(h @ w["up"]) @ w["down"]
        logits = F.layer_norm(x, (d,), self.lnf, self.lnfb) @ self.lm
        self.tok.copy_(logits.argmax(-1))
        self.pos.add_(1).remainder_(self.ctx)

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.step()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.step()
        torch.cuda.synchronize()


def decode(fn, seconds):
    """Tokens one at a time for `seconds`: the host time between two tokens' completions."""
    torch.cuda.synchronize()
    lat = []
    prev = time.perf_counter()
    end = prev + seconds
    while prev < end:
        fn()
        torch.cuda.synchronize()
        now = time.perf_counter()
        lat.append(now - prev)
        prev = now
    return lat


def pct(xs, q):
    s = sorted(xs)
    i = q * (len(s) - 1)
    lo = int(i)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (i - lo)


def summary(lat):
    us = [x * 1e6 for x in lat]
    return {"n": len(us), "p50_us": pct(us, 0.5), "p99_us": pct(us, 0.99),
            "p999_us": pct(us, 0.999), "mean_us": sum(us) / len(us), "max_us": max(us),
            "lat_us": [round(x, 1) for x in us]}


# ---------------------------------------------------------------------------------------------
# training: ResNet-50

import torchvision  # noqa: E402

net = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
xb = torch.randn(128, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
yb = torch.randint(0, 1000, (128,), device=dev)


def train_steps(n):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(net(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# the samplers

_port = [9470]


def sampler_cmd(mode):
    if mode == "off":
        return None
    _port[0] += 1
    prom = ["--prometheus", f"127.0.0.1:{_port[0]}", "--usage"]
    if mode == "agent_default":
        return [args.bin, "run"] + prom
    if mode == "agent_10hz":
        return [args.bin, "run", "--interval-ms", "100"] + prom
    if mode == "agent_1hz":
        return [args.bin, "run", "--interval-ms", "1000"] + prom
    if mode == "agent_10hz_nogpm":
        return [args.bin, "run", "--interval-ms", "100", "--no-gpm"] + prom
    if mode.startswith("probe_"):
        parts = mode.split("_")
        hz = 10.0
        if parts[-1].endswith("hz"):
            hz = float(parts[-1][:-2])
            parts = parts[:-1]
        return [sys.executable, os.path.join(HERE, "nvml_probe.py"), "_".join(parts[1:]), str(hz)]
    raise SystemExit(f"unknown mode {mode}")


def start(mode, tag):
    cmd = sampler_cmd(mode)
    if cmd is None:
        return None
    log.write(f"\n== {tag} {mode}: {' '.join(cmd)}\n")
    log.flush()
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def stop(p, mode):
    if p is None:
        return {"rc": None}
    alive = p.poll() is None
    scraped = None
    if args.smoke and alive and mode.startswith("agent"):
        try:
            import urllib.request
            body = urllib.request.urlopen(f"http://127.0.0.1:{_port[0]}/metrics", timeout=5).read().decode()
            scraped = [ln for ln in body.splitlines() if ln.startswith(("hw_power", "gpuslack_diagnosis"))][:4]
        except Exception as e:  # noqa: BLE001
            scraped = [f"scrape failed: {e}"]
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = p.wait()
    log.flush()
    return {"rc": rc, "alive_at_end": alive, "scraped": scraped}


def one_run(mode, dec, n_train, tag):
    p = start(mode, tag)
    time.sleep(args.settle_s)
    r = {"mode": mode, "t0": time.time()}
    r["graph"] = summary(decode(dec.graph.replay, args.graph_s))
    r["eager"] = summary(decode(dec.step, args.eager_s))
    secs = train_steps(n_train)
    r["train"] = {"steps": n_train, "seconds": secs, "steps_per_s": n_train / secs}
    r["t1"] = time.time()
    r["sampler"] = stop(p, mode)
    return r


# ---------------------------------------------------------------------------------------------

modes = args.modes.split(",")
say("torch", torch.__version__, torch.cuda.get_device_name(0), "modes", modes)
dec = Decoder()
dec.capture()
say("decoder captured")
# warm-up, once: clocks, cuBLAS/cuDNN autotuning, the allocator, and the binary in page cache
decode(dec.graph.replay, args.warmup_s / 2)
decode(dec.step, args.warmup_s / 4)
train_steps(10)
t = train_steps(10)
n_train = max(5, round(args.train_s * 10 / t))
say(f"training: {10 / t:.2f} steps/s in warm-up, {n_train} steps a run")
for m in modes:  # each sampler once, unmeasured
    if m != "off":
        p = start(m, "warm-up")
        time.sleep(0.5)
        decode(dec.graph.replay, 0.3)
        stop(p, m)

meta = {"argv": sys.argv, "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
        "n_train": n_train, "modes": modes, "host": os.uname().nodename,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settle_s": args.settle_s, "graph_s": args.graph_s, "eager_s": args.eager_s,
        "order": "each round a fresh random permutation of the modes (seeded)"}
rng = random.Random(args.seed)
rounds = []
run_s = None
while len(rounds) < args.max_rounds:
    elapsed = time.time() - T_START
    if len(rounds) >= args.rounds and run_s and elapsed + run_s * len(modes) > args.deadline_s:
        break
    if run_s and elapsed + run_s * len(modes) > args.hard_deadline_s:
        say(f"WARNING: out of time after {len(rounds)} rounds (fewer than --rounds {args.rounds})")
        break
    order = modes[:]
    rng.shuffle(order)
    t_round = time.time()
    runs = [one_run(m, dec, n_train, f"round {len(rounds)}") for m in order]
    run_s = (time.time() - t_round) / len(modes)
    rounds.append({"order": order, "runs": runs})
    brief = "  ".join(f"{r['mode']}: g{r['graph']['p50_us']:.0f}/{r['graph']['p99_us']:.0f} "
                      f"e{r['eager']['p50_us']:.0f}/{r['eager']['p99_us']:.0f} "
                      f"t{r['train']['steps_per_s']:.2f}" for r in sorted(runs, key=lambda r: r["mode"]))
    say(f"round {len(rounds) - 1} ({run_s:.1f} s a run): {brief}")
    with open(os.path.join(args.out, "perturb.json"), "w") as f:
        json.dump({"meta": meta, "rounds": rounds}, f)
say("done", len(rounds), "rounds")
