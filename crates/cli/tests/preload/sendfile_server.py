"""Serves one file to every connection with socket.sendfile (os.sendfile), then closes."""
import socket
import sys
import threading


def serve(conn, path):
    with conn, open(path, "rb") as f:
        conn.sendfile(f)


def main():
    port, path = int(sys.argv[1]), sys.argv[2]
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(64)
    print("listening", port, flush=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn, path), daemon=True).start()


main()
