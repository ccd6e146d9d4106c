#!/usr/bin/env python3
"""A backend that stalls: tests/router_knobs_test.sh shows the router's per-backend `timeout_s`
failing a request over from it, and `request_timeout_s` ending a request before and after its
first byte. By default it accepts connections and never answers. With --first-chunk it reads
each request, answers 200 with an SSE stream's head and one chunk, then sends nothing more;
with --events FILE it appends "closed" to FILE when the router closes such a connection (the
backend request cancelled). Writes {"http": PORT} to --port-file once it listens (written whole:
a rename). Standard library only."""

import argparse
import json
import os
import socket
import threading

CHUNK = {"id": "stall", "object": "chat.completion.chunk", "created": 0, "model": "stall",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "first"}, "finish_reason": None}]}


def first_chunk_then_stall(connection, events):
    data = b""
    while b"\r\n\r\n" not in data:
        piece = connection.recv(65536)
        if not piece:
            return
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        piece = connection.recv(65536)
        if not piece:
            return
        body += piece
    event = ("data: %s\n\n" % json.dumps(CHUNK, separators=(",", ":"))).encode()
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                       + b"%x\r\n%s\r\n" % (len(event), event))
    try:
        while connection.recv(65536):  # nothing more is sent; wait for the router to close
            pass
    except OSError:  # reset: closed too
        pass
    if events:
        with open(events, "a") as f:
            f.write("closed\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--first-chunk", action="store_true")
    ap.add_argument("--events", default="")
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
        if args.first_chunk:
            threading.Thread(target=first_chunk_then_stall, args=(connection, args.events), daemon=True).start()
        else:
            held.append(connection)


if __name__ == "__main__":
    main()
