"""TCP echo server for the sluice apps harness: IPv4, one thread per connection.

Run as `python3 echo_server.py --port 7000`; SIGTERM ends it.
"""
import argparse
import socket
import socketserver


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        conn = self.request
        while True:
            data = conn.recv(65536)
            if not data:
                break
            conn.sendall(data)


class Server(socketserver.ThreadingTCPServer):
    address_family = socket.AF_INET
    allow_reuse_address = True
    daemon_threads = True
    # 100 clients connect at once: the default backlog of 5 would drop SYNs and stall them.
    request_queue_size = 256


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bind", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=7000)
    args = parser.parse_args()
    with Server((args.bind, args.port), Handler) as server:
        print(f"echo server listening on {args.bind}:{args.port}", flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main()
