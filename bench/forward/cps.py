#!/usr/bin/env python3
"""Connections per second through forwarders (issue #16): one short request/response per
connection (64 B up, 64 B echoed back, close), 4 client threads, interleaved rounds; run inside
a namespace of its own (needs root for `--sockmap`):

  ip netns add fwc-t-cps && ip -n fwc-t-cps link set lo up
  ip netns exec fwc-t-cps python3 bench/forward/cps.py --fwc target/release/fwc --rounds 5 --conns 2000
  ip netns del fwc-t-cps

Prints per variant: median connections/s with all rounds, and the forwarder's CPU ms per
1000 connections. Variants: fwc-splice, fwc-sockmap, haproxy (if installed)."""
import argparse, json, os, shutil, socket, statistics, subprocess, tempfile, threading, time

ap = argparse.ArgumentParser()
ap.add_argument("--fwc", required=True)
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--conns", type=int, default=2000)
a = ap.parse_args()

srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0)); srv.listen(1024); SPORT = srv.getsockname()[1]

def echo_conn(c):
    try:
        d = c.recv(4096)
        c.sendall(d)
    finally:
        c.close()

def serve():
    while True:
        c, _ = srv.accept()
        threading.Thread(target=echo_conn, args=(c,), daemon=True).start()
threading.Thread(target=serve, daemon=True).start()

tmp = tempfile.mkdtemp()
def fwc_cfg(port):
    p = os.path.join(tmp, f"{port}.json")
    json.dump({"version": 1, "listeners": [{"rule": f"cps-{port}", "proto": "tcp", "listen_addr": "127.0.0.1",
        "listen_port": port, "targets": [{"host": "127.0.0.1", "port": SPORT}], "allow_from": [],
        "up_bytes_per_sec": None, "down_bytes_per_sec": None, "burst_bytes": None, "max_conns": None,
        "conn_rate": None, "proxy_protocol": None, "idle_timeout_ms": 60000, "connect_timeout_ms": 5000}]}, open(p, "w"))
    return p

procs, ports = {}, {}
procs["fwc-splice"] = subprocess.Popen([a.fwc, "forward", "--config", fwc_cfg(7001)], stderr=subprocess.DEVNULL); ports["fwc-splice"] = 7001
procs["fwc-sockmap"] = subprocess.Popen([a.fwc, "forward", "--sockmap", "--config", fwc_cfg(7002)], stderr=subprocess.DEVNULL); ports["fwc-sockmap"] = 7002
if shutil.which("haproxy"):
    cfg = os.path.join(tmp, "haproxy.cfg")
    open(cfg, "w").write(f"global\n  maxconn 1000\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 1m\n  timeout server 1m\n"
                         f"frontend f\n  bind 127.0.0.1:7003\n  default_backend b\nbackend b\n  server s 127.0.0.1:{SPORT}\n")
    procs["haproxy"] = subprocess.Popen(["haproxy", "-db", "-f", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); ports["haproxy"] = 7003
time.sleep(1.5)

def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")

def round_(port, n, threads=4):
    msg = b"x" * 64
    errors = [0]
    def worker(k):
        for _ in range(k):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(msg)
            got = b""
            while len(got) < len(msg):
                x = s.recv(4096)
                if not x:
                    break
                got += x
            if got != msg:
                errors[0] += 1
            s.close()
    ts = [threading.Thread(target=worker, args=(n // threads,)) for _ in range(threads)]
    t0 = time.monotonic()
    for t in ts: t.start()
    for t in ts: t.join()
    return (n // threads * threads) / (time.monotonic() - t0), errors[0]

res = {v: [] for v in ports}
cpus = {v: [] for v in ports}
errs = {v: 0 for v in ports}
for r in range(a.rounds):
    for v, port in ports.items():
        c0 = cpu(procs[v].pid)
        rate, e = round_(port, a.conns)
        cpus[v].append((cpu(procs[v].pid) - c0) * 1e6 / a.conns)
        res[v].append(rate); errs[v] += e
for p in procs.values():
    p.terminate(); p.wait()
print("| variant | connections/s (median) | all rounds | forwarder CPU ms per 1000 conns (median) | wrong replies |")
print("|---|---:|---|---:|---:|")
for v in ports:
    print(f"| {v} | {statistics.median(res[v]):.0f} | {', '.join(f'{x:.0f}' for x in res[v])} | {statistics.median(cpus[v]):.0f} | {errs[v]} |")
