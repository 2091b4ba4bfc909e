#!/usr/bin/python3
"""One discovery peer with python-zeroconf: registers NAME and browses TYPE in one process until SIGTERM/SIGINT.

usage: zc_peer.py NAME TYPE --interface-ip IP

The baseline of `multipeer-bench scaling`: a peer that advertises itself and finds every other, as one
`multipeer chat` process does (its discovery part). Prints `registered NAME` once probing and announcing are
done, and `found OTHER` for every other instance once it is resolved (ServiceInfo.request, up to 3 s, as
scripts/interop/zc_browse.py does; an instance that cannot be resolved is printed as `found OTHER unresolved`).
Its own instance is not printed. Run with Debian's /usr/bin/python3 (python3-zeroconf 0.47).
"""
import argparse
import signal
import sys
import threading

from zeroconf import IPVersion, ServiceBrowser, ServiceInfo, ServiceStateChange, Zeroconf


def service_type(raw):
    raw = raw.rstrip(".")
    if not raw.endswith(".local"):
        raw += ".local"
    return raw + "."


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("type")
    parser.add_argument("--interface-ip", required=True)
    args = parser.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print_lock = threading.Lock()

    def say(text):
        with print_lock:
            print(text, flush=True)

    stype = service_type(args.type)
    zc = Zeroconf(interfaces=[args.interface_ip], ip_version=IPVersion.V4Only)
    own = f"{args.name}.{stype}"

    def on_change(zeroconf, service_type, name, state_change):
        if state_change is not ServiceStateChange.Added or name == own:
            return
        instance = name[: -len(service_type) - 1] if name.endswith("." + service_type) else name
        info = ServiceInfo(service_type, name)
        say(f"found {instance}" if info.request(zeroconf, 3000) else f"found {instance} unresolved")

    # Browse first, as `multipeer chat` does: the browser runs while the registration probes.
    browser = ServiceBrowser(zc, stype, handlers=[on_change])
    info = ServiceInfo(
        stype,
        own,
        port=4242,
        properties={"a": "1"},
        parsed_addresses=[args.interface_ip],
        server=f"{args.name}-zc.local.",
    )
    zc.register_service(info)
    say(f"registered {args.name}")
    while not stop.wait(0.2):
        pass
    browser.cancel()
    zc.unregister_service(info)
    zc.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
