# SO_REUSEPORT / SO_REUSEADDR on engine sockets through the preload shim: set before bind,
# read back by getsockopt, and carried by bind, so that two listeners of one program share a
# port (each accepts some of the clients), a socket without the option is refused
# (EADDRINUSE), and of two SO_REUSEADDR sockets bound to one port only one listens.
# Usage: reuseport.py PORT CLIENTS ADDR_PORT (prints "listening", then once CLIENTS
# connections were echoed, how many each listener took)
import errno
import selectors
import socket
import sys

port, clients, addr_port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


def code(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def shared():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("0.0.0.0", port))
    s.listen(clients)
    return s


a, b = shared(), shared()
print("getsockopt", a.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT))
plain = socket.socket()
try:
    plain.bind(("0.0.0.0", port))
    print("plain bound")
except OSError as e:
    print("plain", code(e))

c, d = socket.socket(), socket.socket()
for s in (c, d):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", addr_port))
print("reuseaddr both bound")
c.listen(1)
try:
    d.listen(1)
    print("second listen ok")
except OSError as e:
    print("second listen", code(e))

print("listening", flush=True)
sel = selectors.DefaultSelector()
sel.register(a, selectors.EVENT_READ, "a")
sel.register(b, selectors.EVENT_READ, "b")
got = {"a": 0, "b": 0}
while got["a"] + got["b"] < clients:
    for key, _ in sel.select(timeout=30):
        conn, _ = key.fileobj.accept()
        data = conn.recv(16)
        conn.sendall(data)
        conn.close()
        got[key.data] += 1
print("accepted a=%d b=%d" % (got["a"], got["b"]))
print("done", flush=True)
