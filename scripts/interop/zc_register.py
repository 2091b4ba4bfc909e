#!/usr/bin/python3
"""Registers one DNS-SD service with python-zeroconf until SIGTERM/SIGINT, then says goodbye.

usage: zc_register.py NAME TYPE PORT [key=value ...] [--interface-ip IP]... [--allow-name-change]

TYPE is `_chat._tcp` or `_chat._tcp.local.`. Prints `registered NAME` (the final instance name, which differs
from NAME only with --allow-name-change after a conflict) once probing and announcing are done, and exits 0
after the goodbye. Run with Debian's /usr/bin/python3 (python3-zeroconf 0.47).
"""
import argparse
import signal
import socket
import sys
import threading

from zeroconf import IPVersion, ServiceInfo, Zeroconf


def service_type(raw):
    raw = raw.rstrip(".")
    if not raw.endswith(".local"):
        raw += ".local"
    return raw + "."


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("type")
    parser.add_argument("port", type=int)
    parser.add_argument("txt", nargs="*", help="key=value TXT entries")
    parser.add_argument("--interface-ip", action="append", default=[])
    parser.add_argument("--allow-name-change", action="store_true")
    args = parser.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    properties = {}
    for entry in args.txt:
        key, _, value = entry.partition("=")
        properties[key] = value
    stype = service_type(args.type)
    addresses = args.interface_ip or [socket.gethostbyname(socket.gethostname())]
    has_v4 = any(":" not in a for a in addresses)
    has_v6 = any(":" in a for a in addresses)
    version = IPVersion.All if has_v4 and has_v6 else (IPVersion.V6Only if has_v6 else IPVersion.V4Only)
    zc = Zeroconf(interfaces=addresses if args.interface_ip else None, ip_version=version)
    info = ServiceInfo(
        stype,
        f"{args.name}.{stype}",
        port=args.port,
        properties=properties,
        parsed_addresses=addresses,
        server=f"{args.name.replace(' ', '-').replace('.', '-')}-zc.local.",
    )
    zc.register_service(info, allow_name_change=args.allow_name_change)
    print(f"registered {info.name[: -len(stype) - 1]}", flush=True)
    while not stop.wait(0.2):
        pass
    zc.unregister_service(info)
    zc.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
