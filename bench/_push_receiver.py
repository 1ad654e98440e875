"""The phones' push service for bench/push.py: tests/push_service.py in a process of its own.

Run by bench/push.py, not by hand:

    python bench/_push_receiver.py --devices 3 --out <file>

It starts a PushService (HTTPS on 127.0.0.1 with a CA of its own; it decrypts every message
with the device's keys, RFC 8291, and checks the board's VAPID signature, RFC 8292) and makes
`--devices` subscriptions, as that many browsers would. Its first stdout line is JSON:

    {"url": ..., "env": {"SSL_CERT_FILE": ..., "REQUESTS_CA_BUNDLE": ...},
     "devices": [{"endpoint": ..., "keys": {...}, "name": "bench phone 1"}, ...]}

`env` is what the board needs to trust the service; each device is the body of a
POST /api/push/subscriptions once `events` is added. Then every push that arrives is
appended to `--out` as one JSON line, flushed at once:

    {"device", "received", "kind", "approvalId", "status", "vapidOk", "decrypted",
     "problems", "bytes"}

`received` is the service's Delivery.received: time.monotonic() once the (encrypted) body
had been read. On Linux that clock is system-wide, so bench/push.py compares it with the
time.monotonic() the asking agent took just before writing its request.

It stops when its stdin ends (bench/push.py closes it, or exits): it prints a last JSON line
{"deliveries", "connections", "tlsFailures", "cpu"} and removes the CA's files.
"""

from gevent import monkey

monkey.patch_all()

import argparse
import json
import os
import sys
import time

import gevent
import gevent.os

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests"))
from push_service import PushService


def record(delivery):
    payload = delivery.payload if isinstance(delivery.payload, dict) else {}
    return {"device": delivery.name, "received": delivery.received,
            "kind": payload.get("kind"), "approvalId": payload.get("approvalId"),
            "status": delivery.status, "vapidOk": delivery.vapid_ok,
            "decrypted": delivery.plaintext is not None, "problems": delivery.problems,
            "bytes": len(delivery.body)}


def write_new(service, out, written):
    """ Append the deliveries after the first `written`; how many are written now. """
    for delivery in service.deliveries[written:]:
        out.write(json.dumps(record(delivery)) + "\n")
    out.flush()
    return len(service.deliveries)


def write_deliveries(service, out, written):
    """ Append each delivery as it is answered: the service appends it, sets its status
    and tells its waiters without yielding in between. `written`: a one-item list. """
    while True:
        try:
            service.wait_for(lambda: len(service.deliveries) > written[0], timeout=3600)
        except AssertionError:
            continue
        written[0] = write_new(service, out, written[0])


def wait_stdin_end():
    gevent.os.make_nonblocking(0)
    while gevent.os.nb_read(0, 4096):
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    service = PushService()
    subs = [service.subscribe(name=f"bench phone {i + 1}") for i in range(args.devices)]
    print(json.dumps({"url": service.url, "env": service.env,
                      "devices": [{**s.as_json(), "name": s.name} for s in subs]}),
          flush=True)
    with open(args.out, "a") as out:
        written = [0]
        writer = gevent.spawn(write_deliveries, service, out, written)
        try:
            wait_stdin_end()
        finally:
            gevent.sleep(0.1)  # a push being answered right now is written too
            writer.kill()
            write_new(service, out, written[0])
            service.close()
    print(json.dumps({"deliveries": len(service.deliveries),
                      "connections": service.connections,
                      "tlsFailures": [repr(e) for e in service.tls_failures],
                      "cpu": time.process_time()}), flush=True)


if __name__ == "__main__":
    main()
