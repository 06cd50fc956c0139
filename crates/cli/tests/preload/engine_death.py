"""Waits in epoll on one accepted connection; when the engine dies, reports what the
program sees: its read, its write, and a new socket (each must fail cleanly, not hang)."""
import errno
import selectors
import socket
import sys


def name(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def main():
    port = int(sys.argv[1])
    srv = socket.socket()
    srv.bind(("0.0.0.0", port))
    srv.listen(4)
    print("listening", port, flush=True)
    conn, _ = srv.accept()
    conn.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(conn, selectors.EVENT_READ)
    print("accepted", flush=True)
    while True:
        sel.select()  # no timeout: the engine's death must wake it
        try:
            data = conn.recv(65536)
        except BlockingIOError:
            continue
        except OSError as e:
            print("recv", name(e), flush=True)
            break
        if not data:
            print("recv eof", flush=True)
            break
    try:
        conn.send(b"x")
        print("send ok", flush=True)
    except OSError as e:
        print("send", name(e), flush=True)
    try:
        s = socket.socket()
        s.connect(("10.77.0.2", 9))
        print("new socket connected", flush=True)
    except OSError as e:
        print("new socket", name(e), flush=True)


main()
