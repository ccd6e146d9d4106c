#!/usr/bin/env python3
"""Where a process's resident memory is at its peak: runs CMD, samples /proc/PID/smaps every
50 ms, and prints the peak RSS split by mapping (the heap, anonymous mappings, shared libraries
together, each file), plus a timeline of the RSS. Used for docs/quantization.md's peak-RSS
breakdown, e.g.

  python3 bench/rss_breakdown.py build/launch/tpserve generate --model FILE.gguf --prompt-ids ... \\
      --max-tokens 65 --ignore-eos --temperature 0 --threads 2 --device cpu --json

Linux only; the command's own output is discarded.
"""
import collections
import subprocess
import sys
import time


def snapshot(pid):
    by_mapping = collections.Counter()
    name = None
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                parts = line.split()
                if "-" in parts[0] and len(parts) >= 5 and ":" in parts[3]:
                    name = parts[5] if len(parts) > 5 else "[anon]"
                    if name.startswith(("/usr/lib", "/lib")):
                        name = "[shared libraries]"
                elif parts[0] == "Rss:":
                    by_mapping[name] += int(parts[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return by_mapping


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.time()
    peak, at_peak, timeline = 0, collections.Counter(), []
    while proc.poll() is None:
        s = snapshot(proc.pid)
        if s:
            total = sum(s.values())
            if not timeline or time.time() - start - timeline[-1][0] >= 0.5:
                timeline.append((time.time() - start, total // 1024))
            if total > peak:
                peak, at_peak = total, s
        time.sleep(0.05)
    print(f"peak RSS {peak / 1024:.1f} MiB (exit status {proc.returncode})")
    for name, kib in at_peak.most_common(12):
        print(f"  {kib / 1024:8.1f} MiB  {name}")
    print("timeline (s, MiB):", " ".join(f"{t:.1f}:{m}" for t, m in timeline))


if __name__ == "__main__":
    main()
