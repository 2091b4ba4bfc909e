#!/usr/bin/python3
"""Browses one DNS-SD service type with python-zeroconf and prints events as JSON lines until the timeout.

usage: zc_browse.py TYPE [--timeout S] [--interface-ip IP]...

Each line: {"event": "found"|"updated"|"lost", "name": instance, "fullname": ..., "info": {TXT key: value},
"port": ..., "addresses": [...], "server": ...}. Found and updated services are resolved (ServiceInfo.request)
before they are printed; a service that cannot be resolved within 3 s is printed without port and addresses.
Run with Debian's /usr/bin/python3 (python3-zeroconf 0.47).
"""
import argparse
import json
import signal
import sys
import threading

from zeroconf import IPVersion, ServiceBrowser, ServiceInfo, ServiceStateChange, Zeroconf

print_lock = threading.Lock()


def service_type(raw):
    raw = raw.rstrip(".")
    if not raw.endswith(".local"):
        raw += ".local"
    return raw + "."


def emit(obj):
    with print_lock:
        print(json.dumps(obj, sort_keys=True), flush=True)


def decode(value):
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("type")
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--interface-ip", action="append", default=[])
    args = parser.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    stype = service_type(args.type)
    addresses = args.interface_ip
    has_v4 = any(":" not in a for a in addresses)
    has_v6 = any(":" in a for a in addresses)
    version = IPVersion.V4Only
    if has_v4 and has_v6:
        version = IPVersion.All
    elif has_v6:
        version = IPVersion.V6Only
    zc = Zeroconf(interfaces=addresses or None, ip_version=version)

    def on_change(zeroconf, service_type, name, state_change):
        instance = name[: -len(service_type) - 1] if name.endswith("." + service_type) else name
        event = {
            ServiceStateChange.Added: "found",
            ServiceStateChange.Updated: "updated",
            ServiceStateChange.Removed: "lost",
        }[state_change]
        record = {"event": event, "name": instance, "fullname": name}
        if event != "lost":
            info = ServiceInfo(service_type, name)
            if info.request(zeroconf, 3000):
                record["port"] = info.port
                record["addresses"] = info.parsed_addresses()
                record["server"] = info.server
                record["info"] = {decode(k): decode(v) for k, v in (info.properties or {}).items()}
            else:
                record["unresolved"] = True
        emit(record)

    browser = ServiceBrowser(zc, stype, handlers=[on_change])
    stop.wait(args.timeout)
    browser.cancel()
    zc.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
