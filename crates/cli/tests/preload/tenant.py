"""A tenant of a shared engine, well-behaved or hostile (run under `sluice run`; issue 23).

  tenant.py bind [--reuseport] PORT...   binds and listens on each PORT; one line each:
                                         `port P ok` or `port P errno NAME`
  tenant.py listen-until START MAX       listens on START, START+1, ... until refused or MAX
                                         listeners: `listeners N` then `refused NAME` if refused
  tenant.py attach                       one listener on an ephemeral port (the first engine
                                         socket attaches): `attached PORT` or `refused NAME`
  tenant.py echo [--reuseport] PORT      echo server, a thread per connection: `listening PORT`

Every mode but echo prints `holding` and keeps its sockets until killed, so that what it took
stays taken while the test runs."""
import errno
import socket
import sys
import threading
import time


def errname(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def listener(port, reuseport=False):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if reuseport:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("0.0.0.0", port))
    s.listen(64)
    return s


def hold(held):
    print("holding", len(held), flush=True)
    while True:
        time.sleep(3600)


def serve(conn):
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                return
            conn.sendall(data)


def main():
    args = sys.argv[1:]
    mode = args.pop(0)
    reuseport = "--reuseport" in args
    args = [a for a in args if a != "--reuseport"]
    held = []
    if mode == "bind":
        for port in map(int, args):
            try:
                held.append(listener(port, reuseport))
                print(f"port {port} ok", flush=True)
            except OSError as e:
                print(f"port {port} errno {errname(e)}", flush=True)
        hold(held)
    elif mode == "listen-until":
        start, most = int(args[0]), int(args[1])
        refused = None
        for port in range(start, start + most):
            try:
                held.append(listener(port))
            except OSError as e:
                refused = errname(e)
                break
        print("listeners", len(held), flush=True)
        if refused:
            print("refused", refused, flush=True)
        hold(held)
    elif mode == "attach":
        try:
            s = listener(0)
            held.append(s)
            print("attached", s.getsockname()[1], flush=True)
        except OSError as e:
            print("refused", errname(e), flush=True)
        hold(held)
    elif mode == "echo":
        srv = listener(int(args[0]), reuseport)
        print("listening", args[0], flush=True)
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
    else:
        sys.exit(f"unknown mode {mode}")


main()
