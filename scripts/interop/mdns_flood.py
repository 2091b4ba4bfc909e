#!/usr/bin/env python3
"""Hostile-input driver for the end-to-end tests: floods a responder with mDNS queries and garbage.

Usage: mdns_flood.py INSTANCE SERVICE_TYPE --interface-ip IP --target IP [--seconds S] [--rate N]

Runs inside a lab namespace. It sends, for S seconds at N packets per second, multicast queries for the
service type's PTR and the instance's SRV (without known answers, so each one asks for an answer) mixed with
malformed packets (compression loops, lengths past the end, absurd counts, invalid UTF-8), and counts the
response packets that come back from TARGET. Prints one JSON object:
{"queries": ..., "garbage": ..., "responses": ..., "answers": {"PTR": n, "SRV": n}, "seconds": S}
"""
import argparse
import json
import select
import socket
import struct
import time

GROUP = "224.0.0.251"
PORT = 5353


def encode_name(name):
    out = b""
    for label in name.rstrip(".").split("."):
        raw = label.encode()
        out += bytes([len(raw)]) + raw
    return out + b"\x00"


def query(name, qtype):
    header = struct.pack("!HHHHHH", 0, 0, 1, 0, 0, 0)
    return header + encode_name(name) + struct.pack("!HH", qtype, 1)


GARBAGE = [
    # question whose name is a pointer to itself (compression loop)
    struct.pack("!HHHHHH", 0, 0, 1, 0, 0, 0) + b"\xc0\x0c" + b"\x00\x01\x00\x01",
    # header claiming 65535 answers, no body
    struct.pack("!HHHHHH", 0, 0x8400, 0, 65535, 0, 0),
    # answer whose RDLENGTH runs past the end
    struct.pack("!HHHHHH", 0, 0x8400, 0, 1, 0, 0) + b"\x00" + b"\x00\x01\x00\x01\x00\x00\x00\x78\xff\xff\x01",
    # label with invalid UTF-8
    struct.pack("!HHHHHH", 0, 0, 1, 0, 0, 0) + b"\x02\xff\xfe\x00" + b"\x00\x0c\x00\x01",
    # truncated header
    b"\x00\x00\x84",
]


def answer_types(packet):
    """Types of the answer-section records of a response, parsed just enough to count them."""
    if len(packet) < 12:
        return []
    _, flags, qd, an, _, _ = struct.unpack("!HHHHHH", packet[:12])
    if not flags & 0x8000:
        return []
    offset = 12

    def skip_name(offset):
        while offset < len(packet):
            length = packet[offset]
            if length == 0:
                return offset + 1
            if length & 0xC0 == 0xC0:
                return offset + 2
            offset += 1 + length
        return len(packet)

    for _ in range(qd):
        offset = skip_name(offset) + 4
    types = []
    for _ in range(an):
        offset = skip_name(offset)
        if offset + 10 > len(packet):
            break
        rtype, _, _, rdlength = struct.unpack("!HHIH", packet[offset:offset + 10])
        types.append(rtype)
        offset += 10 + rdlength
    return types


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("instance")
    parser.add_argument("service_type")
    parser.add_argument("--interface-ip", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rate", type=int, default=1000)
    args = parser.parse_args()

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("", PORT))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                    socket.inet_aton(GROUP) + socket.inet_aton(args.interface_ip))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(args.interface_ip))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
    sock.setblocking(False)

    service = args.service_type.rstrip(".") + ".local."
    packets = [query(service, 12), query(args.instance + "." + service, 33)]
    queries = garbage = responses = 0
    answers = {"PTR": 0, "SRV": 0}
    interval = 1.0 / args.rate
    start = time.monotonic()
    next_send = start
    index = 0
    while True:
        now = time.monotonic()
        if now - start >= args.seconds + 1.5:  # keep listening for late answers
            break
        if now >= next_send and now - start < args.seconds:
            if index % 10 == 9:
                sock.sendto(GARBAGE[(index // 10) % len(GARBAGE)], (GROUP, PORT))
                garbage += 1
            else:
                sock.sendto(packets[index % 2], (GROUP, PORT))
                queries += 1
            index += 1
            next_send += interval
        timeout = max(0.0, min(next_send - time.monotonic(), 0.05))
        readable, _, _ = select.select([sock], [], [], timeout)
        while readable:
            try:
                data, (source, _) = sock.recvfrom(9000)
            except BlockingIOError:
                break
            if source == args.target:
                types = answer_types(data)
                if types:
                    responses += 1
                    answers["PTR"] += types.count(12)
                    answers["SRV"] += types.count(33)
    print(json.dumps({"queries": queries, "garbage": garbage, "responses": responses, "answers": answers,
                      "seconds": args.seconds}), flush=True)


if __name__ == "__main__":
    main()
