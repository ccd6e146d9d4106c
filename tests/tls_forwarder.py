#!/usr/bin/env python3
"""A TLS terminator for tests: accepts TLS on 127.0.0.1 (a free port, written to PORT_FILE once
listening) and forwards each connection's plaintext to 127.0.0.1:TARGET_PORT, both ways.
Used by tests/router_test.sh to put an https:// endpoint in front of a `tpserve serve` replica.

Usage: tls_forwarder.py CERT_PEM KEY_PEM TARGET_PORT PORT_FILE
"""
import os
import select
import socket
import ssl
import sys
import threading


def forward(tls, backend):
    """Copies each side to the other until either ends. One thread per connection: an SSL
    object must not be read and written from two threads at once."""
    try:
        while True:
            ready = [tls] if tls.pending() else select.select([tls, backend], [], [])[0]
            if tls in ready:
                data = tls.recv(65536)
                if not data:
                    return
                backend.sendall(data)
            if backend in ready:
                data = backend.recv(65536)
                if not data:
                    return
                tls.sendall(data)
    except OSError:  # ssl.SSLError included
        return
    finally:
        backend.close()
        tls.close()


def serve(conn, context, target_port):
    try:
        tls = context.wrap_socket(conn, server_side=True)
    except OSError as e:  # ssl.SSLError included: e.g. the client refused our certificate
        print(f"tls_forwarder: handshake failed: {e}", file=sys.stderr, flush=True)
        conn.close()
        return
    try:
        backend = socket.create_connection(("127.0.0.1", target_port))
    except OSError:
        tls.close()
        return
    forward(tls, backend)


def main():
    cert, key, target_port, port_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(listener.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn, context, target_port), daemon=True).start()


if __name__ == "__main__":
    main()
