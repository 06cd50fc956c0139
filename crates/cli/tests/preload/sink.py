"""Sink server, one thread per connection, blocking sockets (run under `sluice run`).

`sink.py PORT`: prints `listening PORT`; per connection, reads to EOF while hashing,
prints `progress PORT` once PROGRESS bytes have arrived, then prints `received PORT N SHA256`,
answers the client with `N SHA256\\n` and closes."""
import hashlib
import socket
import sys
import threading

PROGRESS = 8 << 20


def serve(conn, port):
    with conn:
        h = hashlib.sha256()
        n = 0
        told = False
        while True:
            data = conn.recv(1 << 20)
            if not data:
                break
            h.update(data)
            n += len(data)
            if not told and n >= PROGRESS:
                told = True
                print("progress", port, flush=True)
        print("received", port, n, h.hexdigest(), flush=True)
        conn.sendall(f"{n} {h.hexdigest()}\n".encode())


def main():
    port = int(sys.argv[1])
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(16)
    print("listening", port, flush=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn, port), daemon=True).start()


main()
