#!/usr/bin/env python3
"""Connections per second through forwarders (issue #16): each connection sends PAYLOAD bytes,
half-closes, reads the echo until EOF and checks it byte for byte (64 B: a request/response;
64 KiB: many small flows). The echo server and the clients run in processes of their own (one
Python process per client, no shared GIL), variants in interleaved rounds. Run inside a
namespace of its own:

  ip netns add fwc-t-cps && ip -n fwc-t-cps link set lo up
  ip netns exec fwc-t-cps python3 bench/forward/cps.py --fwc target/release/fwc \\
      --realm target/release/realm-peer --rounds 5 --conns 2000 --payload 64
  ip netns del fwc-t-cps

Prints per variant: median connections/s with all rounds, and the forwarder's CPU ms per
1000 connections (utime+stime of its process). Variants: fwc-splice, fwc-copy, realm (with
`--realm`, a bench/forward/peers/realm binary), haproxy (if installed)."""
import argparse, json, multiprocessing as mp, os, shutil, socket, statistics, subprocess, tempfile, threading, time

ap = argparse.ArgumentParser()
ap.add_argument("--fwc", required=True)
ap.add_argument("--realm", help="path of the realm-peer binary (bench/forward/peers/realm)")
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--conns", type=int, default=2000)
ap.add_argument("--payload", type=int, default=64, help="bytes per connection each way")
ap.add_argument("--clients", type=int, default=4, help="client processes")
ap.add_argument("--json", help="also write the results here")
a = ap.parse_args()


def echo_server(port_q):
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0)); srv.listen(4096); port_q.put(srv.getsockname()[1])

    def echo(c):
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    break
                c.sendall(d)
        except OSError:
            pass
        finally:
            c.close()
    while True:
        c, _ = srv.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()


def client(args):
    port, n, payload = args
    msg = bytes(i % 251 for i in range(payload))
    wrong = 0
    t0 = time.monotonic()
    for _ in range(n):
        got = bytearray()
        try:
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(msg)
                s.shutdown(socket.SHUT_WR)
                while True:
                    x = s.recv(65536)
                    if not x:
                        break
                    got += x
        except OSError:
            pass  # refused or reset: counted as a wrong reply
        if got != msg:
            wrong += 1
    return t0, time.monotonic(), wrong


def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")


def main():
    q = mp.Queue()
    server = mp.Process(target=echo_server, args=(q,), daemon=True); server.start()
    sport = q.get()
    tmp = tempfile.mkdtemp()

    def fwc_cfg(port):
        p = os.path.join(tmp, f"{port}.json")
        json.dump({"version": 1, "listeners": [{"rule": f"cps-{port}", "proto": "tcp", "listen_addr": "127.0.0.1",
            "listen_port": port, "targets": [{"host": "127.0.0.1", "port": sport}], "allow_from": [],
            "up_bytes_per_sec": None, "down_bytes_per_sec": None, "burst_bytes": None, "max_conns": None,
            "conn_rate": None, "proxy_protocol": None, "idle_timeout_ms": 60000, "connect_timeout_ms": 5000}]}, open(p, "w"))
        return p

    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs, ports = {}, {}
    try:
        run(procs, ports, quiet, fwc_cfg, sport, tmp)
    finally:
        # Also on an error or Ctrl-C: no forwarder outlives the bench.
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def run(procs, ports, quiet, fwc_cfg, sport, tmp):
    procs["fwc-splice"] = subprocess.Popen([a.fwc, "forward", "--config", fwc_cfg(7001)], **quiet); ports["fwc-splice"] = 7001
    procs["fwc-copy"] = subprocess.Popen([a.fwc, "forward", "--config", fwc_cfg(7004)], env={**os.environ, "FWC_FORWARD_SPLICE": "0"}, **quiet); ports["fwc-copy"] = 7004
    if a.realm:
        procs["realm"] = subprocess.Popen([a.realm, "127.0.0.1:7005", f"127.0.0.1:{sport}"], **quiet); ports["realm"] = 7005
    if shutil.which("haproxy"):
        cfg = os.path.join(tmp, "haproxy.cfg")
        open(cfg, "w").write(f"global\n  maxconn 1000\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 1m\n  timeout server 1m\n"
                             f"frontend f\n  bind 127.0.0.1:7003\n  default_backend b\nbackend b\n  server s 127.0.0.1:{sport}\n")
        procs["haproxy"] = subprocess.Popen(["haproxy", "-db", "-f", cfg], **quiet); ports["haproxy"] = 7003
    time.sleep(1.5)
    for v, p in procs.items():
        if p.poll() is not None:
            raise SystemExit(f"{v} exited at start ({p.returncode})")

    res = {v: [] for v in ports}
    cpus = {v: [] for v in ports}
    errs = {v: 0 for v in ports}
    per = a.conns // a.clients
    with mp.Pool(a.clients) as pool:
        for _ in range(a.rounds):
            for v, port in ports.items():
                c0 = cpu(procs[v].pid)
                out = pool.map(client, [(port, per, a.payload)] * a.clients)
                cpus[v].append((cpu(procs[v].pid) - c0) * 1e6 / (per * a.clients))
                res[v].append(per * a.clients / (max(o[1] for o in out) - min(o[0] for o in out)))
                errs[v] += sum(o[2] for o in out)
                time.sleep(0.5)  # TIME_WAIT churn settles between variants
    print(f"{a.conns} connections per round, {a.payload} B each way, {a.clients} client processes, {a.rounds} rounds")
    print("| variant | connections/s (median) | all rounds | forwarder CPU ms per 1000 conns (median) | failed or wrong |")
    print("|---|---:|---|---:|---:|")
    for v in ports:
        print(f"| {v} | {statistics.median(res[v]):.0f} | {', '.join(f'{x:.0f}' for x in res[v])} | {statistics.median(cpus[v]):.0f} | {errs[v]} |")
    if a.json:
        json.dump({"payload": a.payload, "conns": a.conns, "clients": a.clients, "cps": res, "cpu_ms_per_1000": cpus, "wrong": errs},
                  open(a.json, "w"), indent=2)


if __name__ == "__main__":
    main()
