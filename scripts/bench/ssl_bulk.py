#!/usr/bin/env python3
"""Bulk transfer over one TCP connection with Python's ssl module (OpenSSL's SSL_write/SSL_read), or plain
sockets: the "ordinary program" baseline of multipeer-bench connection benchmark 1.

  ssl_bulk.py server PORT BYTES tls|plain [CERT KEY]   prints the receive rate in bytes per second
  ssl_bulk.py client PORT BYTES tls|plain
"""
import socket
import ssl
import sys
import time

CHUNK = 256 * 1024


def server(port, total, tls, cert=None, key=None):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(1)
    print("listening", flush=True)
    connection, _ = listener.accept()
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.load_cert_chain(cert, key)
        connection = context.wrap_socket(connection, server_side=True)
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    received = 0
    started = None
    while received < total:
        count = connection.recv_into(view, CHUNK)
        if count == 0:
            break
        if started is None:
            started = time.perf_counter()
        received += count
    elapsed = time.perf_counter() - started
    print(f"rate {received / elapsed:.0f} bytes {received}", flush=True)


def client(port, total, tls):
    connection = socket.create_connection(("127.0.0.1", port))
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        connection = context.wrap_socket(connection)
    payload = bytes(CHUNK)
    sent = 0
    while sent < total:
        connection.sendall(payload[: min(CHUNK, total - sent)])
        sent += min(CHUNK, total - sent)
    connection.close()


if __name__ == "__main__":
    role, port, total, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    if role == "server":
        server(port, total, mode == "tls", *sys.argv[5:7])
    else:
        client(port, total, mode == "tls")
