"""TLS rows: the SDK's own HTTP/2 streams with TLS against the same without.

Issue 24 asks that a TLS client (what production runs) publish and subscribe
at least at 0.8 of a plaintext one. This starts two ``LocalServer``s, one
plaintext and one requiring TLS (certificates made here with ``trustme``),
and measures on each, in turns:

- ``publish_async``: ``Client.publish_async`` with an ack handler and
  ``future=False``, window 1024, 100-byte values (the pipelined row of
  ``make bench``);
- ``subscribe``: a subscription reading a filled partition from the earliest
  offset, 100-byte values.

``make bench`` runs the same comparison as its ``tls`` workload (rows and
ratios in its JSON); this probe is the quick look.

Run: ``python -m bench.tls_probe [--count 20000] [--reps 3]``; prints msgs/s
medians and TLS/plain ratios.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import trustme

import liftbridge
from liftbridge.testing import LocalServer

_VALUE = b"a" * 100
_WAIT = 120.0


def _publish_async(client: liftbridge.Client, stream: str, count: int) -> float:
    done = threading.Event()
    acked = [0]

    def on_ack(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        acked[0] += 1
        if acked[0] == count:
            done.set()

    start = time.perf_counter()
    for _ in range(count):
        client.publish_async(stream, _VALUE, on_ack, future=False)
    if not done.wait(_WAIT):
        raise RuntimeError(f"only {acked[0]} of {count} acks came")
    return count / (time.perf_counter() - start)


def _subscribe(client: liftbridge.Client, stream: str, count: int) -> float:
    start = time.perf_counter()
    with client.subscribe(stream, start=0, stop=count - 1) as subscription:
        read = sum(1 for _ in subscription)
    if read != count:
        raise RuntimeError(f"read {read} of {count}")
    return count / (time.perf_counter() - start)


def _run(client: liftbridge.Client, name: str, count: int) -> dict[str, float]:
    stream = f"tls-probe-{name}-{time.monotonic_ns()}"
    client.create_stream(stream)
    publish = _publish_async(client, stream, count)
    return {"publish_async": publish, "subscribe": _subscribe(client, stream, count)}


def write_certificates(folder: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1 (``trustme``), written
    into ``folder``: ``{"ca": ..., "cert": ..., "key": ...}``."""
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    files = {"ca": folder / "ca.pem", "cert": folder / "cert.pem", "key": folder / "key.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    server_cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    server_cert.private_key_pem.write_to_path(str(files["key"]))
    return files


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tls_probe", description=__doc__)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tls-probe-") as folder:
        files = write_certificates(Path(folder))
        with (
            LocalServer(log_level="warn") as plain_server,
            LocalServer(
                log_level="warn",
                tls_cert=files["cert"],
                tls_key=files["key"],
                tls_ca=files["ca"],
            ) as tls_server,
            liftbridge.Client(plain_server.address, max_inflight=1024) as plain,
            liftbridge.Client(
                tls_server.address, max_inflight=1024, tls=liftbridge.TLSConfig(ca=files["ca"])
            ) as secure,
        ):
            results: dict[str, dict[str, list[float]]] = {"plain": {}, "tls": {}}
            for rep in range(args.reps):
                for name, client in (("plain", plain), ("tls", secure)):
                    for row, rate in _run(client, f"{name}{rep}", args.count).items():
                        results[name].setdefault(row, []).append(rate)
    for row in ("publish_async", "subscribe"):
        plain_rate = statistics.median(results["plain"][row])
        tls_rate = statistics.median(results["tls"][row])
        print(
            f"{row:14} plain {plain_rate:10,.0f} msgs/s   tls {tls_rate:10,.0f} msgs/s   "
            f"tls/plain {tls_rate / plain_rate:.2f}"
        )


if __name__ == "__main__":
    main()
