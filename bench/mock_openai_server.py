#!/usr/bin/env python3
"""A stand-in OpenAI-compatible backend that answers at once: the router's overhead is measured
against it (bench/router_overhead_bench.py), so that the engine's queue does not hide it. Each
completion streams `max_tokens` one-word chunks `--chunk-delay-ms` apart (0: back to back), or
returns them in one body; usage counts the prompt as one token per 4 bytes.

Usage: python3 bench/mock_openai_server.py --port-file FILE [--model mock] [--chunk-delay-ms 0]
           [--status 429]   (--status: every completion gets that status and an OpenAI error body,
           e.g. 429 as a server over its queue limit: tests/router_test.sh)
           [--record FILE]  (appends each POST's body, as received, to FILE as a JSON string per line:
           tests/router_test.sh checks what the router sent)
Routes: GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions (HTTP/1.1,
keep-alive, chunked SSE). Standard library only; one asyncio loop.
"""

import argparse
import asyncio
import json
import os
import time


def sse(obj):
    data = f"data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()
    return b"%x\r\n%s\r\n" % (len(data), data)


async def handle(reader, writer, args):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    headers[k.strip().lower()] = v.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            close = headers.get("connection", "").lower() == "close"
            if method == "POST" and args.record:
                with open(args.record, "a") as f:
                    f.write(json.dumps(body.decode("utf-8", "replace")) + "\n")
            if method == "GET" and path == "/health":
                await reply(writer, 200, b"", "text/plain", close)
            elif method == "GET" and path == "/v1/models":
                out = {"object": "list", "data": [{"id": args.model, "object": "model", "owned_by": "mock"}]}
                await reply(writer, 200, json.dumps(out).encode(), "application/json", close)
            elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions") and args.status != 200:
                err = {"error": {"message": f"mock: status {args.status}", "type": "rate_limit_error", "code": args.status}}
                await reply(writer, args.status, json.dumps(err).encode(), "application/json", close)
            elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
                await complete(writer, json.loads(body or b"{}"), path.endswith("chat/completions"), args, close)
            else:
                await reply(writer, 404, b'{"error": {"message": "not found", "type": "not_found_error"}}',
                            "application/json", close)
            if close:
                break
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def reply(writer, status, body, content_type, close):
    reason = {200: "OK", 404: "Not Found", 429: "Too Many Requests"}.get(status, "Error")
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                 f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n".encode() + body)
    await writer.drain()


async def complete(writer, req, chat, args, close):
    n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
    if chat:
        prompt = "".join(str(m.get("content", "")) for m in req.get("messages", []))
    else:
        prompt = str(req.get("prompt", ""))
    usage = {"prompt_tokens": max(1, len(prompt) // 4), "completion_tokens": n,
             "total_tokens": max(1, len(prompt) // 4) + n}
    rid, created = f"mock-{time.monotonic_ns()}", int(time.time())
    kind = "chat.completion" if chat else "text_completion"
    if not req.get("stream"):
        text = "tok " * n
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                  if chat else {"index": 0, "text": text, "finish_reason": "length"})
        out = {"id": rid, "object": kind, "created": created, "model": args.model, "choices": [choice], "usage": usage}
        return await reply(writer, 200, json.dumps(out).encode(), "application/json", close)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                 + (b"Connection: close\r\n" if close else b"") + b"\r\n")
    kind += ".chunk" if chat else ""
    for i in range(n):
        piece = {"delta": {"content": "tok "}} if chat else {"text": "tok "}
        last = i == n - 1
        choice = {"index": 0, **piece, "finish_reason": "length" if last else None}
        writer.write(sse({"id": rid, "object": kind, "created": created, "model": args.model, "choices": [choice]}))
        await writer.drain()
        if args.chunk_delay_ms > 0 and not last:
            await asyncio.sleep(args.chunk_delay_ms / 1000)
    if (req.get("stream_options") or {}).get("include_usage"):
        writer.write(sse({"id": rid, "object": kind, "created": created, "model": args.model, "choices": [],
                          "usage": usage}))
    data = b"data: [DONE]\n\n"
    writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
    await writer.drain()


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--model", default="mock")
    ap.add_argument("--chunk-delay-ms", type=float, default=0)
    ap.add_argument("--status", type=int, default=200)
    ap.add_argument("--record", default="")
    args = ap.parse_args()
    server = await asyncio.start_server(lambda r, w: handle(r, w, args), "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"http": port}, f)
    os.replace(tmp, args.port_file)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
