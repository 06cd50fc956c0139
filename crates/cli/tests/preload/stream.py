"""Linux-side sender for sink.py: streams 1 MiB chunks (each distinct: its index in its
first 8 bytes) to HOST:PORT.

`stream.py HOST PORT complete MIB PAUSE_MS`: sends MIB chunks, pausing PAUSE_MS after each,
shuts down writing and reads the sink's `N SHA256` answer; prints `ok N SHA256` when it
matches what was sent (exit 0), else `FAILED ...` (exit 1).

`stream.py HOST PORT until-error`: sends without end; prints `reset after N bytes` when the
connection is reset (ECONNRESET, or EPIPE after the reset), `error ERRNO after N bytes` on
another error, `timeout after N bytes` when a send blocks for 30 s (all exit 0), or
`completed` if 64 GiB went through (exit 1)."""
import errno
import hashlib
import random
import socket
import sys
import time

CHUNK = 1 << 20


def chunks():
    base = bytearray(random.Random(4).randbytes(CHUNK))
    i = 0
    while True:
        base[:8] = i.to_bytes(8, "little")
        yield bytes(base)
        i += 1


def complete(s, mib, pause):
    h = hashlib.sha256()
    n = 0
    gen = chunks()
    for _ in range(mib):
        c = next(gen)
        s.sendall(c)
        h.update(c)
        n += len(c)
        if pause:
            time.sleep(pause)
    s.shutdown(socket.SHUT_WR)
    answer = b""
    while True:
        b = s.recv(4096)
        if not b:
            break
        answer += b
    want = f"{n} {h.hexdigest()}"
    if answer.decode(errors="replace").strip() != want:
        print("FAILED: sent", want, "the sink answered", repr(answer), flush=True)
        sys.exit(1)
    print("ok", want, flush=True)


def until_error(s):
    n = 0
    try:
        for c in chunks():
            s.sendall(c)
            n += len(c)
            if n >= 64 << 30:
                print("completed", flush=True)
                sys.exit(1)
    except (ConnectionResetError, BrokenPipeError):
        print("reset after", n, "bytes", flush=True)
    except socket.timeout:
        print("timeout after", n, "bytes", flush=True)
    except OSError as e:
        print("error", errno.errorcode.get(e.errno, e.errno), "after", n, "bytes", flush=True)


def main():
    host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    s = socket.create_connection((host, port), timeout=30)
    print("connected", flush=True)
    if mode == "complete":
        complete(s, int(sys.argv[4]), int(sys.argv[5]) / 1000)
    else:
        until_error(s)


main()
