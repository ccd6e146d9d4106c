#!/usr/bin/env python3
"""A backend that accepts connections and never answers: tests/router_knobs_test.sh shows the
router's per-backend `timeout_s` failing a request over from it. Writes {"http": PORT} to
--port-file once it listens (written whole: a rename). Standard library only."""

import argparse
import json
import os
import socket


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    args = ap.parse_args()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"http": server.getsockname()[1]}, f)
    os.replace(tmp, args.port_file)
    held = []  # open, unread, unanswered until the process ends
    while True:
        connection, _ = server.accept()
        held.append(connection)


if __name__ == "__main__":
    main()
