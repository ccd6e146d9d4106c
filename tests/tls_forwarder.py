#!/usr/bin/env python3
"""A TLS terminator for tests: accepts TLS on 127.0.0.1 (a free port, written to PORT_FILE once
listening) and forwards each connection's plaintext to 127.0.0.1:TARGET_PORT, both ways.
Used by tests/router_tls_test.sh to put an https:// endpoint in front of a `tpserve serve`
replica. With --client-ca CA_PEM every client must present a certificate signed by a CA in
CA_PEM (mutual TLS); a handshake without one fails and is logged.

Usage: tls_forwarder.py [--client-ca CA_PEM] CERT_PEM KEY_PEM TARGET_PORT PORT_FILE
"""
import argparse
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


def linger_close(conn):
    """Closes after the client does (1 s at most), what it sends meanwhile read and dropped: a
    close with unread bytes would reset the connection, and the client (over TLS 1.3 already
    writing its request) might then never read the alert that says why the handshake failed.
    (An SSLSocket's shutdown leaves TLS: the reads are of the plain socket.)"""
    try:
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(1)
        while conn.recv(65536):
            pass
    except OSError:
        pass
    conn.close()


def serve(conn, context, target_port):
    try:
        # The handshake apart: a wrap_socket that fails it closes the socket at once.
        tls = context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
    except OSError:
        conn.close()
        return
    try:
        tls.do_handshake()
    except OSError as e:  # ssl.SSLError included: e.g. the client refused our certificate
        print(f"tls_forwarder: handshake failed: {e}", file=sys.stderr, flush=True)
        linger_close(tls)
        return
    try:
        backend = socket.create_connection(("127.0.0.1", target_port))
    except OSError:
        tls.close()
        return
    forward(tls, backend)


def main():
    parser = argparse.ArgumentParser(description="A TLS terminator for tests.")
    parser.add_argument("--client-ca", help="PEM CAs; set: a client certificate signed by one is required")
    parser.add_argument("cert")
    parser.add_argument("key")
    parser.add_argument("target_port", type=int)
    parser.add_argument("port_file")
    args = parser.parse_args()
    target_port, port_file = args.target_port, args.port_file
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    if args.client_ca:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(args.client_ca)
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
