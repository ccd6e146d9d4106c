"""Processes for the router benchmarks (router_prefix_bench.py, router_failover_bench.py,
router_overhead_bench.py): start a server on a free loopback port, read the port it got from
its --port-file, wait until /health answers. Standard library only."""

import os
import re
import subprocess
import sys
import time
import urllib.request


def start(cmd, work, name, port_flags=True):
    """Starts `cmd` (plus --host 127.0.0.1 --http-port 0 --port-file, unless port_flags is false:
    then cmd writes WORK/NAME.port itself) in a session of its own, its output in WORK/NAME.log;
    returns (process, HTTP port). Exits the benchmark when it dies or says no port in 2 minutes."""
    port_file = os.path.join(work, name + ".port")
    if os.path.exists(port_file):
        os.remove(port_file)  # a previous setting's
    log = os.path.join(work, name + ".log")
    extra = ["--host", "127.0.0.1", "--http-port", "0", "--port-file", port_file] if port_flags else []
    p = subprocess.Popen(cmd + extra, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    for _ in range(1200):
        if os.path.exists(port_file):
            m = re.search(r'"http":\s*(\d+)', open(port_file).read())
            if m:
                return p, int(m.group(1))
        if p.poll() is not None:
            break
        time.sleep(0.1)
    sys.exit(f"{name} did not start: {open(log).read()[-2000:]}")


def wait_healthy(port):
    """Until GET /health on the port answers 200 (2 minutes at most)."""
    for _ in range(1200):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"port {port} never became healthy")
