#!/usr/bin/env python3
"""Prefix-cache hit rate behind `tpserve router`: a multi-turn chat workload with shared system
prompts sent to one replica directly, and to two replicas through the router with
`round_robin` and with `cache_aware` (issue 32's target: cache_aware within 10% of one
replica's hit rate; round robin about halves it). Hit rates are the replicas' own
vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total, summed; mean TTFT as the client
sees it (streamed, time to the first data event).

Usage: python3 bench/router_prefix_bench.py [--tpserve build/launch/tpserve] [--conversations 7]
           [--turns 6] [--system-words 600] [--model gemma-4-tiny] [--tokenizer tests/fixtures/...]
Real processes on loopback (the built-in random model unless --model names a checkpoint);
standard library only.
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


def prefix_counts(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    def total(name):
        return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))
    return total("vllm:prefix_cache_hits_total"), total("vllm:prefix_cache_queries_total")


def chat(port, model, messages):
    body = json.dumps({"model": model, "messages": messages, "max_tokens": 4, "stream": True,
                       "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                 {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft = None
    text = ""
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            if ttft is None:
                ttft = time.perf_counter() - t0
            event = json.loads(line[6:])
            for c in event.get("choices", []):
                text += c.get("delta", {}).get("content") or ""
    return ttft, text


def workload(conversations, turns, system_words):
    """Each conversation: its own long system prompt, then `turns` user turns, each request
    carrying the whole history (what a chat client sends), conversations interleaved."""
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    systems = [" ".join(f"{words[(c * 7 + i) % len(words)]}{c}" for i in range(system_words))
               for c in range(conversations)]
    histories = [[{"role": "system", "content": s}] for s in systems]
    for t in range(turns):
        for c in range(conversations):
            histories[c].append({"role": "user", "content": f"turn {t} of conversation {c}: tell me more"})
            yield c, histories[c]


def run(port, model, args):
    ttfts = []
    for c, messages in workload(args.conversations, args.turns, args.system_words):
        ttft, text = chat(port, model, messages)
        ttfts.append(ttft)
        messages.append({"role": "assistant", "content": text or "ok"})
    return ttfts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpserve", default=os.path.join(ROOT, "build/launch/tpserve"))
    ap.add_argument("--model", default="gemma-4-tiny")
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "tests/fixtures/tokenizers/gemma/tokenizer.json"))
    ap.add_argument("--conversations", type=int, default=7)  # odd: round robin alternates each conversation
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--system-words", type=int, default=600)
    args = ap.parse_args()
    serve = ["serve", "--model", args.model, "--device", "cpu", "--enable-prefix-caching", "--grpc-port", "-1",
             "--threads", "1"]
    if args.model.startswith("gemma-4-"):
        serve += ["--load-format", "dummy", "--tokenizer", args.tokenizer]
    name = os.path.basename(args.model.rstrip("/"))
    procs = []
    results = {}
    with tempfile.TemporaryDirectory() as work:
        try:
            for label, policy in (("one replica", None), ("2 replicas, round_robin", "round_robin"),
                                  ("2 replicas, cache_aware", "cache_aware")):
                for p in procs:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait()
                procs = []
                replicas = []
                for i in range(1 if policy is None else 2):
                    p, port = start([args.tpserve] + serve, work, f"r{i}")
                    procs.append(p)
                    wait_healthy(port)
                    replicas.append(port)
                front = replicas[0]
                if policy is not None:
                    cfg = os.path.join(work, "router.json")
                    json.dump({"models": {name: {"policy": policy, "backends": [
                        f"http://127.0.0.1:{p}/v1" for p in replicas]}}}, open(cfg, "w"))
                    p, front = start([args.tpserve, "router", "--config", cfg], work, "router")
                    procs.append(p)
                    wait_healthy(front)
                ttfts = run(front, name, args)
                hits = queries = 0.0
                for port in replicas:
                    h, q = prefix_counts(port)
                    hits += h
                    queries += q
                results[label] = (hits / queries if queries else 0.0, sum(ttfts) / len(ttfts), len(ttfts))
                print(f"{label:26s} prefix-cache hit rate {results[label][0]:6.1%}  mean TTFT "
                      f"{results[label][1] * 1000:7.1f} ms  ({len(ttfts)} requests)", flush=True)
        finally:
            for p in procs:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(timeout=30)
                except (OSError, subprocess.TimeoutExpired):
                    pass
    one = results["one replica"][0]
    for label in ("2 replicas, round_robin", "2 replicas, cache_aware"):
        print(f"{label}: {results[label][0] / one if one else 0:.2f}x one replica's hit rate")


if __name__ == "__main__":
    main()
