#!/usr/bin/env python3
"""Summarise a bench/forward/run.sh run: medians per variant, CPU, cap accuracy -> JSON + markdown.

usage: report.py RAW_DIR OUT_DIR REPEATS TIME TOPOLOGY VARIANT...
"""
import glob
import json
import os
import platform
import statistics
import subprocess
import sys

raw, out, repeats, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
topology = sys.argv[5]
variants = sys.argv[6:]
# The kernel's own forward, the reference of every ratio.
KERNEL = {"loopback": "nft-redirect", "veth": "nft-dnat"}[topology]
KERNEL_LABEL = {"loopback": "nft REDIRECT", "veth": "nft DNAT"}[topology]


def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except Exception:
        return None


cpu = {}
with open(os.path.join(raw, "cpu.jsonl")) as f:
    for line in f:
        e = json.loads(line)
        cpu[(e["variant"], e["repeat"])] = e

rows = []
for v in variants:
    gbps, pcpu, kcpu, scpu, gbytes, loads, sent, p50, p99 = [], [], [], [], [], [], [], [], []
    for r in range(1, repeats + 1):
        j = load(os.path.join(raw, f"{v}.{r}.json"))
        if not j or "end" not in j or "sum_received" not in j["end"]:
            continue
        recv = j["end"]["sum_received"]
        gbps.append(recv["bits_per_second"] / 1e9)
        sent.append(j["end"]["sum_sent"]["bits_per_second"] / 1e9)
        gbytes.append(recv["bytes"] / 1e9)
        c = cpu.get((v, r), {})
        pcpu.append(c.get("proc_cpu_s", 0.0))
        kcpu.append(c.get("kthread_cpu_s", 0.0))
        scpu.append(c.get("sys_cpu_s", 0.0))
        if "load1" in c:
            loads.append(c["load1"])
        if c.get("lat_p50_us") is not None:
            p50.append(c["lat_p50_us"])
            p99.append(c["lat_p99_us"])
    if not gbps:
        rows.append({"variant": v, "runs": 0})
        continue
    med = statistics.median(gbps)
    gb = statistics.median(gbytes)
    pc = statistics.median(pcpu)
    # Per-GB figures are medians of the per-run ratios (a run's CPU over that run's bytes).
    per_gb = lambda xs: round(statistics.median(x / b for x, b in zip(xs, gbytes) if b), 3)
    rows.append({
        "variant": v,
        "runs": len(gbps),
        "gbit_per_s_median": round(med, 3),
        "gbit_per_s_all": [round(x, 3) for x in gbps],
        "proc_cpu_s_median": round(pc, 2),
        "proc_cpu_s_all": pcpu,
        "sys_cpu_s_median": round(statistics.median(scpu), 2),
        "proc_cpu_s_per_gb": round(pc / gb, 3) if gb and v not in ("direct", KERNEL) else None,
        "kthread_cpu_s_all": kcpu,
        "proc_kthread_cpu_s_per_gb": per_gb([p + k for p, k in zip(pcpu, kcpu)]) if v not in ("direct", KERNEL) else None,
        "sys_cpu_s_per_gb": per_gb(scpu),
        "sys_cpu_s_per_gb_all": [round(x / b, 3) for x, b in zip(scpu, gbytes) if b],
        "load1_all": loads,
        # What the sender pushed: above the received rate when a relay queues without
        # backpressure.
        "sent_gbit_per_s_median": round(statistics.median(sent), 3),
        "lat_p50_us_median": round(statistics.median(p50)) if p50 else None,
        "lat_p99_us_median": round(statistics.median(p99)) if p99 else None,
    })
    # --counters: per GB medians of splice calls, TCP segments, veth packets.
    for key in ("splice_calls", "epoll_waits", "context_switches", "tcp_out_segs", "tcp_in_segs", "veth_tx_packets"):
        xs = [(cpu.get((v, r), {}).get(key), b) for r, b in zip(range(1, repeats + 1), gbytes)]
        xs = [x / b for x, b in xs if x is not None and b]
        if xs:
            rows[-1][key + "_per_gb"] = round(statistics.median(xs))
ref = next((r.get("gbit_per_s_median") for r in rows if r["variant"] == KERNEL), None)
for r in rows:
    if ref and r.get("gbit_per_s_median"):
        r["vs_kernel"] = round(r["gbit_per_s_median"] / ref, 3)

caps = []
for p in sorted(glob.glob(os.path.join(raw, "cap-*.iperf.json"))):
    target = int(os.path.basename(p).split("-")[1].split(".")[0])
    j = load(p)
    if not j or "intervals" not in j:
        continue
    # Omitted intervals hold the burst; the last interval holds iperf3's end-of-test drain
    # (it is stretched, e.g. 1.48 s, while the sender stops): both are left out. So is the
    # first one after the omitted ones: iperf3 3.12 sometimes reports it with the seconds of
    # the omitted period included (start 1.0, 2.0 s, one second's bytes).
    ivs = [i["sum"] for i in j["intervals"] if not i["sum"].get("omitted")][1:-1]
    total_bytes = sum(i["bytes"] for i in ivs)
    total_secs = sum(i["seconds"] for i in ivs)
    measured = total_bytes / total_secs
    caps.append({
        "target_bytes_per_s": target,
        "target": {1000000: "1 MB/s", 1250000: "10 Mbit/s", 12500000: "100 Mbit/s"}.get(target, str(target)),
        "measured_bytes_per_s": round(measured),
        "ratio": round(measured / target, 4),
        "seconds_measured": round(total_secs, 1),
    })

def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except Exception:
        return ""

machine = {
    "cpu": sh("lscpu | sed -n 's/^Model name: *//p' | head -1"),
    "cores": os.cpu_count(),
    "kernel": platform.release(),
    "iperf3": sh("iperf3 --version | head -1"),
    "pipe_max_size": sh("cat /proc/sys/fs/pipe-max-size"),
    "loadavg_at_end": sh("cat /proc/loadavg"),
}
result = {"machine": machine, "topology": topology, "kernel_reference": KERNEL, "repeats": repeats, "seconds_per_run": secs, "throughput": rows, "caps": caps}
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")

md = []
md.append(f"Machine: {machine['cpu']}, {machine['cores']} cores, Linux {machine['kernel']}, {machine['iperf3']}; load average at the end: {machine['loadavg_at_end']}.")
where = {"loopback": "over loopback in a throwaway netns", "veth": "client ns -> veth -> forwarder ns -> veth -> server ns"}[topology]
md.append(f"iperf3 {where}, {secs:g} s per run, {repeats} runs per variant, alternating; medians.")
md.append("")
md.append(f"| variant | Gbit/s (median) | vs {KERNEL_LABEL} | forwarder CPU s / run | CPU s per GB | + kernel workers, s per GB | machine CPU s / run | machine CPU s per GB | all runs (Gbit/s) | load avg before each run |")
md.append("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
for r in rows:
    if not r.get("runs"):
        md.append(f"| {r['variant']} | failed | | | | | | | | |")
        continue
    md.append("| {} | {:.2f} | {} | {} | {} | {} | {:.2f} | {:.3f} | {} | {} |".format(
        r["variant"], r["gbit_per_s_median"],
        f"{r['vs_kernel']:.2f}" if r.get("vs_kernel") else "",
        f"{r['proc_cpu_s_median']:.2f}" if r["variant"] not in ("direct", KERNEL) else "(kernel)",
        f"{r['proc_cpu_s_per_gb']:.3f}" if r.get("proc_cpu_s_per_gb") is not None else "",
        f"{r['proc_kthread_cpu_s_per_gb']:.3f}" if r.get("proc_kthread_cpu_s_per_gb") is not None else "",
        r["sys_cpu_s_median"], r["sys_cpu_s_per_gb"], ", ".join(f"{x:.2f}" for x in r["gbit_per_s_all"]),
        ", ".join(f"{x:g}" for x in r["load1_all"])))
if any(r.get("lat_p50_us_median") is not None for r in rows):
    md.append("")
    md.append("Sent vs received (a relay without backpressure lets the sender run ahead), and a new short connection's first byte under the elephant flow (medians over runs of each run's p50/p99).")
    md.append("")
    md.append("| variant | sent Gbit/s | received Gbit/s | first byte p50 µs | p99 µs |")
    md.append("|---|---:|---:|---:|---:|")
    for r in rows:
        if r.get("runs"):
            md.append(f"| {r['variant']} | {r['sent_gbit_per_s_median']:.2f} | {r['gbit_per_s_median']:.2f} | {r.get('lat_p50_us_median') or ''} | {r.get('lat_p99_us_median') or ''} |")
if any("tcp_out_segs_per_gb" in r for r in rows):
    md.append("")
    md.append("Per GB forwarded (medians of the per-run ratios): splice(2) calls, epoll_wait(2) calls and context switches of the forwarding process, TCP segments sent/received in the forwarder's namespace (nstat), packets sent on the forwarder's veths.")
    md.append("")
    md.append("| variant | splice calls per GB | epoll_wait per GB | context switches per GB | TcpOutSegs per GB | TcpInSegs per GB | veth tx packets per GB |")
    md.append("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if r.get("runs"):
            md.append("| {} | {} | {} | {} | {} | {} | {} |".format(r["variant"], *(r.get(k + "_per_gb", "") for k in ("splice_calls", "epoll_waits", "context_switches", "tcp_out_segs", "tcp_in_segs", "veth_tx_packets"))))
if caps:
    md.append("")
    md.append("| cap | target bytes/s | measured bytes/s | measured/target |")
    md.append("|---|---:|---:|---:|")
    for c in caps:
        md.append(f"| {c['target']} | {c['target_bytes_per_s']} | {c['measured_bytes_per_s']} | {c['ratio']:.4f} |")
with open(os.path.join(out, "results.md"), "w") as f:
    f.write("\n".join(md) + "\n")
print("\n".join(md))
