"""fetch_loop.py HOST PORT PATH COUNT [GAP_S]: fetches http://HOST:PORT/PATH COUNT times (a new
connection each, as curl or urllib does, GAP_S seconds apart), checks every body has the first fetch's length,
prints one `fetch I SECONDS` line per fetch and `ok COUNT MAX P99` at the end."""
import sys
import time
import urllib.request

host, port, path, count = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
gap = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
url = f"http://{host}:{port}/{path}"
times = []
length = None
for i in range(count):
    if gap:
        time.sleep(gap)
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=10) as r:
        body = r.read()
    dt = time.monotonic() - t0
    if length is None:
        length = len(body)
    if len(body) != length or length == 0:
        print(f"bad body length {len(body)} (first was {length})", flush=True)
        sys.exit(1)
    times.append(dt)
    print(f"fetch {i} {dt:.6f}", flush=True)
s = sorted(times)
p99 = s[min(len(s) - 1, (len(s) * 99) // 100)]
print(f"ok {count} {s[-1]:.6f} {p99:.6f}", flush=True)
