# TCP_CONGESTION on engine sockets through the preload shim: the engine's default, unknown
# names (ENOENT), an empty value (EINVAL), NUL padding and truncation as Linux reports
# them, inheritance by accepted connections, and a choice made while the socket was
# undecided (the kernel does not run "timely"; the engine does).
# Usage: congestion.py PORT OUT_IP OUT_PORT
import errno
import socket
import sys

TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
port, out_ip, out_port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])


def get(s, n=16):
    return s.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, n)


def name(s):
    return get(s).rstrip(b"\0").decode()


def try_set(s, value):
    try:
        s.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, value)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", port))  # an address the engine owns: an engine socket from here on
print("default", name(l))
print("bogus", try_set(l, b"bogus"))
print("empty", try_set(l, b""))
print("set-reno", try_set(l, b"reno"), name(l))
print("padded", get(l) == b"reno" + b"\0" * 12, "short", get(l, 3).decode())
l.listen(8)
print("listening", flush=True)
c, _ = l.accept()
print("accepted", name(c))
data = c.recv(100)
c.sendall(data)
c.close()

o = socket.socket()
print("undecided-timely", try_set(o, b"timely"))
o.connect((out_ip, out_port))
print("outbound", name(o))
o.sendall(b"ping")
print("echo", o.recv(4).decode())
o.close()
print("done", flush=True)
