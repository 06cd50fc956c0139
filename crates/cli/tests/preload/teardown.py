# Teardown offload through the preload shim: Sluice's private TCP option set on the listener
# while it is undecided and read back once it is an engine socket, inherited by accepted
# sockets; or, with `env`, asked for by `sluice run --teardown-offload` for every socket.
# Each connection's data is read to end of stream, echoed, and the socket closed: the
# engine's teardown stage finishes the close (LAST-ACK).
# Usage: teardown.py PORT CONNECTIONS [env]
import socket
import sys

TCP_TEARDOWN_OFFLOAD = 0x5354
port, conns = int(sys.argv[1]), int(sys.argv[2])
from_env = len(sys.argv) > 3 and sys.argv[3] == "env"


def option(s):
    return s.getsockopt(socket.IPPROTO_TCP, TCP_TEARDOWN_OFFLOAD)


l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if not from_env:
    l.setsockopt(socket.IPPROTO_TCP, TCP_TEARDOWN_OFFLOAD, 1)
l.bind(("0.0.0.0", port))  # an address the engine owns: an engine socket from here on
print("option", option(l))
l.listen(64)
print("listening", flush=True)
for i in range(conns):
    c, _ = l.accept()
    if i == 0:
        print("accepted", option(c), flush=True)
    data = bytearray()
    while True:
        chunk = c.recv(65536)
        if not chunk:
            break
        data += chunk
    c.sendall(data)
    c.close()
print("done", flush=True)
