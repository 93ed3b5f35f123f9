#!/usr/bin/python3
"""Plain TCP between two hosts of the namespace cluster, the baseline for strata's
collectives on the same link (docs/cluster.md, "Transport"): a server, and a client that
sends MB megabytes over STREAMS connections and, with BIDIR 1, receives as many back on each
at once; prints the rate each way.
  ip netns exec NAME-h1 bench/tcp_pair.py server 5999 &
  ip netns exec NAME-h0 bench/tcp_pair.py client 198.18.0.2 5999 20 1 1
Or an exchange over warm connections, as an MPI ring step between two hosts: a connection each
way, set up once; ITERS times (after one warm-up) both peers send MB megabytes at once, and
peer 0 prints the median time from its start signal to both directions done.
  ip netns exec NAME-h1 bench/tcp_pair.py exchange 1 198.18.0.1 5999 8 3 &
  ip netns exec NAME-h0 bench/tcp_pair.py exchange 0 198.18.0.2 5999 8 3
"""
import statistics
import socket
import sys
import threading
import time

HEADER = 16  # bytes to send (12 digits), then whether to send as many back (4 digits)


def receive(conn, n):
    buf = bytearray(1 << 20)
    got = 0
    while got < n:
        k = conn.recv_into(buf, min(len(buf), n - got))
        if k == 0:
            break
        got += k


def handle(conn):
    header = conn.recv(HEADER, socket.MSG_WAITALL)
    n, bidir = int(header[:12]), int(header[12:])
    sender = threading.Thread(target=conn.sendall, args=(bytes(n),)) if bidir else None
    if sender:
        sender.start()
    receive(conn, n)
    if sender:
        sender.join()
    conn.sendall(b"k")
    conn.close()


def serve(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(16)
    while True:
        conn, _ = s.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def one_stream(conn, n, bidir):
    conn.sendall(b"%012d%04d" % (n, bidir))
    receiver = threading.Thread(target=receive, args=(conn, n)) if bidir else None
    if receiver:
        receiver.start()
    conn.sendall(bytes(n))
    if receiver:
        receiver.join()
    conn.recv(1)  # the server has everything


def client(host, port, mb, streams, bidir):
    n = int(mb * 1e6) // streams
    conns = [socket.create_connection((host, port)) for _ in range(streams)]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=one_stream, args=(c, n, bidir)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    print(f"{mb} MB over {streams} connection(s), {'both directions' if bidir else 'one way'}: "
          f"{dt:.3f} s, {mb / dt:.2f} MB/s each way")


def exchange(role, peer, port, mb, iters):
    def accept(p):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", p))
        s.listen(1)
        conn = s.accept()[0]
        s.close()
        return conn

    def connect(p):
        for _ in range(400):  # the peer may not listen yet
            try:
                return socket.create_connection((peer, p))
            except OSError:
                time.sleep(0.05)
        raise SystemExit(f"exchange: no peer at {peer}:{p}")

    # Peer 0 listens on PORT (data in) and PORT+1 (control), peer 1 on PORT+2 (data in).
    if role == 0:
        into, ctl, out = accept(port), accept(port + 1), connect(port + 2)
    else:
        out, ctl, into = connect(port), connect(port + 1), accept(port + 2)
    ctl.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    n = int(mb * 1e6)
    payload = bytes(n)
    times = []
    for it in range(iters + 1):
        if role == 0:
            ctl.sendall(b"g")
        else:
            ctl.recv(1)
        t0 = time.perf_counter()
        receiver = threading.Thread(target=receive, args=(into, n))
        receiver.start()
        out.sendall(payload)
        receiver.join()
        if role == 0:
            ctl.recv(1)  # the peer has received everything too
            if it:
                times.append(time.perf_counter() - t0)
        else:
            ctl.sendall(b"d")
    if role == 0:
        dt = statistics.median(times)
        print(f"{mb} MB each way at once, median of {iters}: {dt:.3f} s, {mb / dt:.2f} MB/s each way")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "server":
        serve(int(sys.argv[2]))
    elif len(sys.argv) >= 5 and sys.argv[1] == "client":
        client(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]),
               int(sys.argv[5]) if len(sys.argv) > 5 else 1, int(sys.argv[6]) if len(sys.argv) > 6 else 0)
    elif len(sys.argv) == 7 and sys.argv[1] == "exchange":
        exchange(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]))
    else:
        sys.exit(__doc__)
