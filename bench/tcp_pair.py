#!/usr/bin/python3
"""Plain TCP between two hosts of the namespace cluster, the baseline for strata's
collectives on the same link (docs/cluster.md, "Transport"): a server, and a client that
sends MB megabytes over STREAMS connections and, with BIDIR 1, receives as many back on each
at once; prints the rate each way.
  ip netns exec NAME-h1 bench/tcp_pair.py server 5999 &
  ip netns exec NAME-h0 bench/tcp_pair.py client 198.18.0.2 5999 20 1 1
"""
import socket, sys, time, threading
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", port)); s.listen(16)
    while True:
        c, _ = s.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()
def handle(c):
    hdr = c.recv(16); n, bidir = int(hdr[:12]), int(hdr[12:16])
    buf = bytearray(1 << 20)
    def rx():
        got = 0
        while got < n:
            k = c.recv_into(buf); got += k
            if k == 0: break
    t = None
    if bidir:
        t = threading.Thread(target=lambda: c.sendall(bytes(n))); t.start()
    rx()
    if t: t.join()
    c.sendall(b"k"); c.close()
def client(host, port, mb, streams, bidir):
    n = int(mb * 1e6) // streams
    socks = [socket.create_connection((host, port)) for _ in range(streams)]
    t0 = time.perf_counter()
    def one(c):
        c.sendall(b"%012d%04d" % (n, bidir))
        rt = None
        if bidir:
            def rx():
                got = 0; buf = bytearray(1 << 20)
                while got < n: got += c.recv_into(buf, min(len(buf), n - got))
            rt = threading.Thread(target=rx); rt.start()
        c.sendall(bytes(n))
        if rt: rt.join()
        c.recv(1)
    ts = [threading.Thread(target=one, args=(c,)) for c in socks]
    [t.start() for t in ts]; [t.join() for t in ts]
    dt = time.perf_counter() - t0
    print(f"{mb} MB x{streams} bidir={bidir}: {dt:.3f} s, {mb/dt:.2f} MB/s each way")
if sys.argv[1] == "server": serve(int(sys.argv[2]))
else: client(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]) if len(sys.argv) > 5 else 1, int(sys.argv[6]) if len(sys.argv) > 6 else 0)
