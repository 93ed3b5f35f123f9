#!/usr/bin/python3
"""Plain TCP between two hosts of the namespace cluster, the baseline for strata's
collectives on the same link (docs/cluster.md, "Transport"): a server, and a client that
sends MB megabytes over STREAMS connections and, with BIDIR 1, receives as many back on each
at once; prints the rate each way.
  ip netns exec NAME-h1 bench/tcp_pair.py server 5999 &
  ip netns exec NAME-h0 bench/tcp_pair.py client 198.18.0.2 5999 20 1 1
"""
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


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "server":
        serve(int(sys.argv[2]))
    elif len(sys.argv) >= 5 and sys.argv[1] == "client":
        client(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]),
               int(sys.argv[5]) if len(sys.argv) > 5 else 1, int(sys.argv[6]) if len(sys.argv) > 6 else 0)
    else:
        sys.exit(__doc__)
