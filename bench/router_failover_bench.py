#!/usr/bin/env python3
"""Failover under load behind `tpserve router`: two `tpserve serve` replicas of one model,
tpbench sends N requests through the router, and one replica is killed (SIGKILL) once a share
of them has been routed (the router's tpserve_router_requests_total). Issue 32's bound: no
request that had not started streaming is lost: the router retries those on the other
replica; a request cut after its first token ends with an error event, which tpbench counts as
a failure with a time to first token.

Usage: python3 bench/router_failover_bench.py [--tpserve build/launch/tpserve]
           [--tpbench build/bench/tpbench/tpbench] [--requests 1000] [--concurrency 32]
           [--kill-after 0.3] [--output-len 32] [--policy round_robin] [--out DIR]
Real processes on loopback: the built-in random gemma-4-tiny, one thread per replica.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from processes import start, wait_healthy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def routed(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(m.group(1)) for m in re.finditer(r'^tpserve_router_requests_total\{[^}]*\} (\S+)$', text, re.M))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpserve", default=os.path.join(ROOT, "build/launch/tpserve"))
    ap.add_argument("--tpbench", default=os.path.join(ROOT, "build/bench/tpbench/tpbench"))
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--kill-after", type=float, default=0.3, help="share of the requests routed before the kill")
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--policy", default="round_robin")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="router-failover-")
    tok = os.path.join(ROOT, "tests/fixtures/tokenizers/gemma/tokenizer.json")
    model = ["--model", "gemma-4-tiny", "--load-format", "dummy", "--tokenizer", tok, "--device", "cpu",
             "--kv-cache-memory", "64MiB", "--threads", "1", "--served-model-name", "tiny"]
    procs = []
    try:
        replicas = [start([args.tpserve, "serve", "--grpc-port", "-1"] + model, work, f"replica{i}") for i in range(2)]
        procs += [p for p, _ in replicas]
        for _, port in replicas:
            wait_healthy(port)
        config = os.path.join(work, "router.json")
        json.dump({"models": {"tiny": {"policy": args.policy,
                                       "backends": [f"http://127.0.0.1:{port}/v1" for _, port in replicas]}}},
                  open(config, "w"))
        router, router_port = start([args.tpserve, "router", "--config", config], work, "router")
        procs.append(router)
        out = args.out or os.path.join(work, "tpbench")
        bench = subprocess.Popen([args.tpbench, "run", "--target", f"http://127.0.0.1:{router_port}/v1", "--api",
                                  "chat", "--model", "tiny", "--concurrency", str(args.concurrency), "--rounds",
                                  str(-(-args.requests // args.concurrency)), "--input_len", "32", "--output_len",
                                  str(args.output_len), "--ignore_eos", "--warmup", "0", "--progress=false",
                                  "--timeout", "120", "--out", out],
                                 stdout=open(os.path.join(work, "tpbench.log"), "w"), stderr=subprocess.STDOUT)
        total = -(-args.requests // args.concurrency) * args.concurrency
        killed_at = None
        while bench.poll() is None:
            if killed_at is None and routed(router_port) >= args.kill_after * total:
                os.killpg(replicas[1][0].pid, signal.SIGKILL)
                killed_at = routed(router_port)
                print(f"killed replica 1 after {killed_at:.0f} of {total} requests were routed", flush=True)
            time.sleep(0.05)
        if bench.returncode != 0:
            sys.exit(f"tpbench failed: {open(os.path.join(work, 'tpbench.log')).read()[-2000:]}")
        records = [json.loads(line) for line in open(os.path.join(out, "requests.jsonl"))]
        failed = [r for r in records if not r["success"]]
        cut_streaming = [r for r in failed if (r.get("ttft_ms") or 0) > 0]
        lost = [r for r in failed if not (r.get("ttft_ms") or 0) > 0]
        result = {"requests": len(records), "succeeded": len(records) - len(failed),
                  "failed_after_first_token": len(cut_streaming), "lost_before_first_token": len(lost),
                  "killed_after_routed": killed_at, "concurrency": args.concurrency, "policy": args.policy,
                  "errors": sorted({r.get("error", "") for r in failed})[:5]}
        print(json.dumps(result, indent=1))
        if args.out:
            json.dump(result, open(os.path.join(args.out, "failover.json"), "w"), indent=1)
        if killed_at is None:
            sys.exit("the run ended before the kill: raise --requests")
        sys.exit(1 if lost else 0)
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
