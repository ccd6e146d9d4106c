#!/usr/bin/env python3
"""What `tpserve router` adds to time to first token: tpbench against a backend that answers at
once (bench/mock_openai_server.py), directly and through the router, alternated round by
round, at each concurrency (issue 32's bound: < 1 ms p50 and < 5 ms p99 added at 256
concurrent streams; 1,000 held). Reports per level and path the medians over rounds of TTFT
p50 / p99 and errors, the router's additions (router - direct) and its CPU time per request.
With --tpserve-old a second router (another build) runs beside the first against the same
stand-in and takes its turn in each round, so that two builds are compared under the same load.

Usage: python3 bench/router_overhead_bench.py [--tpserve build/launch/tpserve] [--tpserve-old PATH]
           [--tpbench build/bench/tpbench/tpbench] [--concurrency 16,256,1000] [--rounds 5]
           [--requests-per-client 4] [--output-len 8] [--chunk-delay-ms 0] [--out DIR]
Everything runs on this machine's loopback: the client, the router and the stand-in share its
cores, so the additions include the router's CPU taken from the other two.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from processes import start

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_seconds(pid):
    """The CPU time of a process's live threads, in seconds: the sum of their schedstat run times
    (nanoseconds; /proc/PID/stat's utime + stime count 10 ms ticks, too coarse for a round)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # the thread ended
    return total / 1e9


def run_tpbench(args, url, concurrency, out):
    cmd = [args.tpbench, "run", "--target", url, "--api", "chat", "--model", "mock", "--concurrency",
           str(concurrency), "--rounds", str(args.requests_per_client), "--input_len", "64", "--output_len",
           str(args.output_len), "--warmup", "1", "--progress=false", "--timeout", "60", "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tpbench failed: {r.stderr[-2000:]}")
    level = json.load(open(os.path.join(out, "summary.json")))[0]  # one level per run
    return {"ttft_p50": level["ttft_ms"]["median"], "ttft_p99": level["ttft_ms"]["p99"], "errors": level["errors"],
            "requests": level["successes"] + level["errors"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpserve", default=os.path.join(ROOT, "build/launch/tpserve"))
    ap.add_argument("--tpserve-old", default="",
                    help="a second tpserve binary (e.g. the branch point's): its router runs beside the first, "
                         "against the same stand-in, and takes its turn in every round (path router-old)")
    ap.add_argument("--tpbench", default=os.path.join(ROOT, "build/bench/tpbench/tpbench"))
    ap.add_argument("--concurrency", default="16,256,1000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests-per-client", type=int, default=4)
    ap.add_argument("--output-len", type=int, default=8)
    ap.add_argument("--chunk-delay-ms", type=float, default=0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="router-overhead-")
    procs = []
    try:
        mock, mock_port = start([sys.executable, os.path.join(ROOT, "bench/mock_openai_server.py"), "--port-file",
                                 os.path.join(work, "mock.port"), "--chunk-delay-ms", str(args.chunk_delay_ms)],
                                work, "mock", port_flags=False)
        procs.append(mock)
        config = os.path.join(work, "router.json")
        json.dump({"models": {"mock": {"backends": [f"http://127.0.0.1:{mock_port}/v1"]}}}, open(config, "w"))
        routers = {}  # path name -> (process, port)
        for name, binary in (("router", args.tpserve), ("router-old", args.tpserve_old)):
            if binary:
                routers[name] = start([binary, "router", "--config", config, "--max-connections", "8192"], work, name)
                procs.append(routers[name][0])
        paths = {"direct": f"http://127.0.0.1:{mock_port}/v1"}
        paths.update({name: f"http://127.0.0.1:{port}/v1" for name, (_, port) in routers.items()})
        names = list(paths)
        rows = []
        for c in [int(x) for x in args.concurrency.split(",")]:
            per = {n: [] for n in names}
            for r in range(args.rounds):
                for name in names[r % len(names):] + names[:r % len(names)]:  # each path first in turn
                    cpu0 = {n: cpu_seconds(p.pid) for n, (p, _) in routers.items()}
                    res = run_tpbench(args, paths[name], c, os.path.join(work, f"{name}-c{c}-r{r}"))
                    # The CPU per request of the router that carried them (its idle probes aside: none here).
                    res["router_cpu_us_per_request"] = 0.0
                    if name in routers:
                        res["router_cpu_us_per_request"] = ((cpu_seconds(routers[name][0].pid) - cpu0[name]) * 1e6 /
                                                            max(1, res["requests"]))
                    per[name].append(res)
                    print(json.dumps({"concurrency": c, "round": r, "path": name, **res}), flush=True)
            med = {n: {k: statistics.median(x[k] for x in v) for k in ("ttft_p50", "ttft_p99", "router_cpu_us_per_request")}
                   for n, v in per.items()}
            errors = {n: sum(x["errors"] for x in v) for n, v in per.items()}
            rows.append((c, med, errors))
        print(f"\nTTFT in ms, medians over {args.rounds} rounds (each {args.requests_per_client} requests per client); "
              f"stand-in: {args.output_len} chunks, {args.chunk_delay_ms} ms apart")
        print(f"{'streams':>8} {'path':>10} {'direct p50':>11} {'router p50':>11} {'added p50':>10} {'direct p99':>11} "
              f"{'router p99':>11} {'added p99':>10} {'errors d/r':>11} {'router CPU us/req':>18}")
        for c, med, errors in rows:
            d = med["direct"]
            for name in routers:
                r = med[name]
                print(f"{c:>8} {name:>10} {d['ttft_p50']:>11.2f} {r['ttft_p50']:>11.2f} "
                      f"{r['ttft_p50'] - d['ttft_p50']:>10.2f} {d['ttft_p99']:>11.2f} {r['ttft_p99']:>11.2f} "
                      f"{r['ttft_p99'] - d['ttft_p99']:>10.2f} {errors['direct']:>5}/{errors[name]:<5} "
                      f"{r['router_cpu_us_per_request']:>18.0f}")
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            json.dump([{"concurrency": c, "median": med, "errors": errors} for c, med, errors in rows],
                      open(os.path.join(args.out, "router_overhead.json"), "w"), indent=1)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
