"""Linux-side verifier: CLIENTS concurrent connections to HOST:PORT, each sending BYTES of
seeded random data while reading the echo back; checks the SHA-256 of what came back.
Mode `fetch`: read until EOF and print the SHA-256 (for the sendfile server).
Prints `ok CLIENTS BYTES` and exits 0, or says what failed and exits 1."""
import hashlib
import random
import socket
import sys
import threading


def echo_one(host, port, nbytes, seed, errors):
    try:
        rng = random.Random(seed)
        data = rng.randbytes(nbytes)
        s = socket.create_connection((host, port), timeout=60)

        def sender():
            view = memoryview(data)
            for i in range(0, len(view), 65536):
                s.sendall(view[i:i + 65536])
            s.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=sender)
        t.start()
        h = hashlib.sha256()
        got = 0
        while True:
            chunk = s.recv(262144)
            if not chunk:
                break
            h.update(chunk)
            got += len(chunk)
        t.join()
        s.close()
        if got != nbytes or h.hexdigest() != hashlib.sha256(data).hexdigest():
            errors.append(f"client {seed}: got {got} of {nbytes} bytes, digest mismatch")
    except Exception as e:  # noqa: BLE001 - every failure is reported
        errors.append(f"client {seed}: {e!r}")


def main():
    host, port, clients, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    mode = sys.argv[5] if len(sys.argv) > 5 else "echo"
    if mode == "fetch":
        digests = []
        for _ in range(clients):
            s = socket.create_connection((host, port), timeout=60)
            h = hashlib.sha256()
            n = 0
            while True:
                chunk = s.recv(262144)
                if not chunk:
                    break
                h.update(chunk)
                n += len(chunk)
            digests.append((n, h.hexdigest()))
        print("fetched", *{f"{n}:{d}" for n, d in digests}, flush=True)
        return
    errors = []
    threads = [threading.Thread(target=echo_one, args=(host, port, nbytes, i, errors)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        print("FAILED", len(errors), "of", clients, *errors[:5], sep="\n", flush=True)
        sys.exit(1)
    print("ok", clients, nbytes, flush=True)


main()
