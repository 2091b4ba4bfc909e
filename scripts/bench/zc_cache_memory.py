#!/usr/bin/python3
"""Memory per cached service of python-zeroconf's DNSCache, measured with tracemalloc.

usage: zc_cache_memory.py [N]

Feeds a fresh DNSCache N services, each as PTR + SRV + TXT (three short entries: a=1, b=two, c=three) + A, the
same records multipeer-bench feeds our BrowserStateMachine, building every record inside the loop so only what
the cache keeps stays allocated. Prints one JSON line: {"instances", "bytes_per_instance", "cached_records"}.
Run with Debian's /usr/bin/python3 (python3-zeroconf 0.47).
"""
import gc
import json
import sys
import time
import tracemalloc

from zeroconf import DNSAddress, DNSCache, DNSPointer, DNSService, DNSText
from zeroconf.const import _CLASS_IN, _CLASS_UNIQUE, _TYPE_A, _TYPE_PTR, _TYPE_SRV, _TYPE_TXT

TYPE = "_zcbench._tcp.local."


def txt_bytes(entries):
    out = b""
    for entry in entries:
        raw = entry.encode()
        out += bytes([len(raw)]) + raw
    return out


def feed(cache, count, prefix):
    now = time.time() * 1000
    for i in range(count):
        instance = f"{prefix}-{i}.{TYPE}"
        host = f"{prefix}-host-{i}.local."
        records = [
            DNSPointer(TYPE, _TYPE_PTR, _CLASS_IN, 4500, instance, created=now),
            DNSService(instance, _TYPE_SRV, _CLASS_IN | _CLASS_UNIQUE, 120, 0, 0, 4242, host, created=now),
            DNSText(instance, _TYPE_TXT, _CLASS_IN | _CLASS_UNIQUE, 4500, txt_bytes(["a=1", "b=two", "c=three"]), created=now),
            DNSAddress(host, _TYPE_A, _CLASS_IN | _CLASS_UNIQUE, 120, bytes([198, 18, i // 250, i % 250 + 1]), created=now),
        ]
        cache.async_add_records(records)


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    feed(DNSCache(), 64, "Warm")  # warm up interned strings and code paths
    gc.collect()
    tracemalloc.start()
    cache = DNSCache()
    gc.collect()
    before, _ = tracemalloc.get_traced_memory()
    feed(cache, count, "Instance")
    gc.collect()
    after, _ = tracemalloc.get_traced_memory()
    cached = sum(len(v) for v in cache.cache.values())
    print(json.dumps({"instances": count, "bytes_per_instance": (after - before) / count, "cached_records": cached}))


if __name__ == "__main__":
    main()
