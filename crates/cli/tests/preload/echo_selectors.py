"""Non-blocking echo server on selectors.DefaultSelector (epoll), edge-triggered if asked."""
import os
import selectors
import socket
import sys
import threading
import time


def main():
    port = int(sys.argv[1])
    sel = selectors.DefaultSelector()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(256)
    srv.setblocking(False)
    sel.register(srv, selectors.EVENT_READ, None)
    pending = {}
    # A kernel descriptor in the same epoll set: a pipe written once while the server sleeps.
    rpipe, wpipe = os.pipe()
    sel.register(rpipe, selectors.EVENT_READ, "pipe")
    threading.Thread(target=lambda: (time.sleep(0.5), os.write(wpipe, b"!")), daemon=True).start()
    print("listening", port, flush=True)
    while True:
        for key, mask in sel.select(timeout=None):
            sock = key.fileobj
            if key.data == "pipe":
                os.read(rpipe, 1)
                print("kernel fd ready", flush=True)
                continue
            if key.data is None:
                while True:
                    try:
                        conn, _ = sock.accept()
                    except BlockingIOError:
                        break
                    conn.setblocking(False)
                    pending[conn] = b""
                    sel.register(conn, selectors.EVENT_READ, "conn")
                continue
            if mask & selectors.EVENT_READ:
                try:
                    data = sock.recv(262144)
                except BlockingIOError:
                    data = None
                except ConnectionError:
                    data = b""
                if data == b"":
                    sel.unregister(sock)
                    rest = pending.pop(sock)
                    if rest:
                        sock.setblocking(True)
                        sock.sendall(rest)
                    sock.close()
                    continue
                if data:
                    pending[sock] += data
            if pending.get(sock):
                try:
                    n = sock.send(pending[sock])
                    pending[sock] = pending[sock][n:]
                except BlockingIOError:
                    pass
                want = selectors.EVENT_READ
                if pending[sock]:
                    want |= selectors.EVENT_WRITE
                sel.modify(sock, want, "conn")


main()
