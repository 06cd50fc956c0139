"""Echo server using dup and fork: each accepted socket is dup'd (the original closed),
a forked child checks that the inherited engine socket fails with EBADF except close and
that a new socket in the child attaches afresh, and the parent echoes on the dup."""
import errno
import os
import socket
import sys
import threading


def child(conn, srv, port):
    try:
        conn.send(b"x")
        result = "send-ok"
    except OSError as e:
        result = errno.errorcode.get(e.errno, str(e.errno))
    conn.close()
    srv.close()
    try:
        s = socket.socket()
        s.bind(("0.0.0.0", port + 1000))
        s.listen(1)
        fresh = "ok"
        s.close()
    except OSError as e:
        fresh = errno.errorcode.get(e.errno, str(e.errno))
    print(f"child inherited-send={result} fresh-listen={fresh}", flush=True)
    os._exit(0)


def serve(conn):
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                return
            conn.sendall(data)


def main():
    port = int(sys.argv[1])
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(256)
    print("listening", port, flush=True)
    first = True
    while True:
        c, _ = srv.accept()
        fd = os.dup(c.fileno())
        c.close()
        conn = socket.socket(fileno=fd)
        if first:
            first = False
            pid = os.fork()
            if pid == 0:
                child(conn, srv, port)
            os.waitpid(pid, 0)
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


main()
