"""Non-blocking echo server on select.poll."""
import os
import select
import socket
import sys
import threading
import time


def main():
    port = int(sys.argv[1])
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(256)
    srv.setblocking(False)
    p = select.poll()
    p.register(srv.fileno(), select.POLLIN)
    conns = {}
    out = {}
    # A kernel descriptor in the same poll set: a pipe written once while the server sleeps.
    rpipe, wpipe = os.pipe()
    p.register(rpipe, select.POLLIN)
    threading.Thread(target=lambda: (time.sleep(0.5), os.write(wpipe, b"!")), daemon=True).start()
    print("listening", port, flush=True)
    while True:
        for fd, ev in p.poll():
            if fd == rpipe:
                os.read(rpipe, 1)
                print("kernel fd ready", flush=True)
                continue
            if fd == srv.fileno():
                while True:
                    try:
                        c, _ = srv.accept()
                    except BlockingIOError:
                        break
                    c.setblocking(False)
                    conns[c.fileno()] = c
                    out[c.fileno()] = b""
                    p.register(c.fileno(), select.POLLIN)
                continue
            c = conns[fd]
            closed = False
            if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                try:
                    data = c.recv(262144)
                    if not data:
                        closed = True
                    out[fd] += data
                except BlockingIOError:
                    pass
                except ConnectionError:
                    closed = True
            if out[fd]:
                try:
                    n = c.send(out[fd])
                    out[fd] = out[fd][n:]
                except BlockingIOError:
                    pass
            if closed and not out[fd]:
                p.unregister(fd)
                del conns[fd], out[fd]
                c.close()
                continue
            p.modify(fd, select.POLLIN | (select.POLLOUT if out[fd] else 0))


main()
