"""Non-blocking echo server on select.select."""
import select
import socket
import sys


def main():
    port = int(sys.argv[1])
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(256)
    srv.setblocking(False)
    out = {}
    print("listening", port, flush=True)
    while True:
        writers = [c for c, b in out.items() if b]
        r, w, _ = select.select([srv] + list(out), writers, [], 1.0)
        for s in r:
            if s is srv:
                while True:
                    try:
                        c, _ = srv.accept()
                    except BlockingIOError:
                        break
                    c.setblocking(False)
                    out[c] = b""
                continue
            try:
                data = s.recv(262144)
            except BlockingIOError:
                continue
            except ConnectionError:
                data = b""
            if not data:
                if out[s]:
                    s.setblocking(True)
                    s.sendall(out[s])
                del out[s]
                s.close()
                continue
            out[s] += data
        for s in w:
            if s in out and out[s]:
                try:
                    n = s.send(out[s])
                    out[s] = out[s][n:]
                except BlockingIOError:
                    pass


main()
