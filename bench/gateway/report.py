# SPDX-License-Identifier: Apache-2.0
"""Report of bench/gateway.sh (standard library only).

  report.py WORKDIR OUT_JSON

Reads WORKDIR/results.jsonl (one line per load-client run), WORKDIR/meta.txt
(key=value lines) and the proxies' logs (WORKDIR/<proxy>-log.txt), checks the
logs saw the requests, prints the table and writes OUT_JSON. Exits 1 when a
check fails.
"""
import json
import os
import statistics
import sys

TARGETS = {"ka_vs_mitmproxy": 10.0, "ka_vs_squid": 1.5, "added_p50_ms": 1.0, "idle_kib": 32.0}


def die(msg):
    print(f"report.py: {msg}", file=sys.stderr)
    sys.exit(1)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, digits=2):
    if x is None:
        return "–"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def main():
    if len(sys.argv) != 3:
        die("usage: report.py WORKDIR OUT_JSON")
    work, out_json = sys.argv[1], sys.argv[2]
    runs = [json.loads(l) for l in open(os.path.join(work, "results.jsonl")) if l.strip()]
    meta, squid_conf, versions = {}, [], []
    for line in open(os.path.join(work, "meta.txt")):
        k, _, v = line.rstrip("\n").partition("=")
        if k == "squid_conf":
            squid_conf.append(v)
        elif k == "version":
            versions.append(v)
        else:
            meta[k] = v
    proxies = meta["proxies"].split()
    targets = ["direct"] + proxies

    # ---- the proxies' own logs must show the requests they were sent
    checks = {}
    for p in proxies:
        total = sum(r["result"].get("completed_total", 0) for r in runs if r["target"] == p)
        logf = os.path.join(work, f"{p}-log.txt")
        if not os.path.exists(logf):
            checks[p] = {"client_answers": total, "log": "none kept (mitmdump -q logs nothing); "
                         "checked against the origin's request count instead"}
            continue
        lines = [l for l in open(logf, errors="replace") if "bench.test" in l and "GET" in l]
        checks[p] = {"client_answers": total, "log_lines_GET_bench.test": len(lines)}
        if len(lines) < total:
            die(f"{p}: its log names bench.test {len(lines)} times, but it answered {total} requests")
    origin_total = int(meta["origin_total"])
    answered = sum(r["result"].get("completed_total", 0) for r in runs)
    if origin_total < answered:
        die(f"the origin answered {origin_total} requests, the clients got {answered} answers")
    for r in runs:
        if r["result"].get("verify_failures"):
            die(f"{r['target']} {r['kind']}: certificate verification failed")

    # ---- medians over rounds
    summary = {}
    for t in targets:
        summary[t] = {}
        for kind in ("ka", "lat", "new"):
            rs = [r["result"] for r in runs if r["target"] == t and r["kind"] == kind]
            if not rs:
                continue
            s = {"runs": len(rs)}
            for f in ("rps", "req_p50_ms", "req_p99_ms", "conn_p50_ms", "conn_p99_ms",
                      "proxy_cpu_us_per_unit", "upstream_cpu_us_per_unit", "client_cpu_us_per_unit",
                      "proxy_oncpu_pct", "proxy_runqueue_wait_pct"):
                vals = [x[f] for x in rs if x.get(f) is not None and x[f] >= 0]
                s[f] = med(vals)
                if f == "rps" and vals:
                    s["rps_min"], s["rps_max"] = min(vals), max(vals)
            s["errors"] = sum(x["errors"] for x in rs)
            if kind == "new":
                full = [r for r in runs if r["target"] == t and r["kind"] == kind]
                hs = sum(r.get("origin_handshakes", 0) for r in full)
                cn = sum(r["result"]["completed_total"] for r in full)
                s["origin_handshakes_per_conn"] = hs / cn if cn else None
            s["concurrency"] = rs[0]["concurrency"]
            for k in ("tls_version", "cipher", "leaf_key", "leaf_issuer_cn"):
                if k in rs[0]:
                    s[k] = rs[0][k]
            summary[t][kind] = s
        idle = [r["result"] for r in runs if r["target"] == t and r["kind"] == "idle"]
        if idle:
            summary[t]["idle"] = {
                "rounds": len(idle),
                "rss_per_conn_kib": med([x["rss_per_conn_kib"] for x in idle]),
                "pss_per_conn_kib": med([x["pss_per_conn_kib"] for x in idle]),
                "rss_per_conn_kib_all": [x["rss_per_conn_kib"] for x in idle],
                "procs": max(x["procs_after"] for x in idle),
                "opened": min(x["opened"] for x in idle),
                "second_request_ok": min(x["second_request_ok"] for x in idle),
                "open_seconds": med([x["open_seconds"] for x in idle]),
                "errors": sum(x["errors"] for x in idle),
            }
    d = summary["direct"]
    for t in proxies:
        for kind in ("ka", "lat", "new"):
            s = summary[t].get(kind)
            if s and d.get(kind):
                key = "conn_p50_ms" if kind == "new" else "req_p50_ms"
                s["added_p50_ms"] = s[key] - d[kind][key]
                key = "conn_p99_ms" if kind == "new" else "req_p99_ms"
                s["added_p99_ms"] = s[key] - d[kind][key]

    ratios = {}
    if "airlock" in proxies:
        a = summary["airlock"]
        for peer in ("mitmproxy", "squid", "airlock-before"):
            if peer not in proxies:
                continue
            b = summary[peer]
            ratios[f"airlock/{peer}"] = {
                "ka_rps": a["ka"]["rps"] / b["ka"]["rps"],
                "new_conns_per_s": a["new"]["rps"] / b["new"]["rps"],
                "lat_p50": a["lat"]["req_p50_ms"] / b["lat"]["req_p50_ms"],
                "ka_proxy_cpu_per_request": a["ka"]["proxy_cpu_us_per_unit"] / b["ka"]["proxy_cpu_us_per_unit"],
                "new_proxy_cpu_per_conn": a["new"]["proxy_cpu_us_per_unit"] / b["new"]["proxy_cpu_us_per_unit"],
            }
            if "idle" in a and "idle" in b and b["idle"]["rss_per_conn_kib"]:
                ratios[f"airlock/{peer}"]["idle_rss_per_conn"] = (
                    a["idle"]["rss_per_conn_kib"] / b["idle"]["rss_per_conn_kib"])

    # ---- the table
    print()
    print(f"Intercepted HTTPS, 1 KiB GET, {meta['rounds']} interleaved rounds, medians "
          f"(keep-alive: {meta['ka_concurrency']} connections x {meta['seconds']} s; "
          f"single: 1 connection x {meta['lat_seconds']} s; new: {meta['new_concurrency']} at a time "
          f"x {meta['seconds']} s). Load {meta['loadavg_before']} -> {meta['loadavg_after']}.")
    hdr = ("| target | ka req/s (min–max) | ka p50 (+added) / p99 ms | single p50 (+added) / p99 ms "
           "| proxy CPU µs/req | new conn/s | new p50 (+added) / p99 ms | proxy CPU µs/conn "
           "| ka proxy on-CPU / run-queue % | idle KiB/conn RSS (PSS) | errors |")
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for t in targets:
        s = summary[t]
        ka, lat, new = s.get("ka", {}), s.get("lat", {}), s.get("new", {})
        idle = s.get("idle")
        add_lat = f" (+{fmt(lat.get('added_p50_ms'), 3)})" if "added_p50_ms" in lat else ""
        add_ka = f" (+{fmt(ka.get('added_p50_ms'), 3)})" if "added_p50_ms" in ka else ""
        add_new = f" (+{fmt(new.get('added_p50_ms'), 2)})" if "added_p50_ms" in new else ""
        errs = sum(s.get(k, {}).get("errors", 0) for k in ("ka", "lat", "new", "idle"))
        print(f"| {t} | {fmt(ka.get('rps'), 0)} ({fmt(ka.get('rps_min'), 0)}–{fmt(ka.get('rps_max'), 0)}) "
              f"| {fmt(ka.get('req_p50_ms'), 3)}{add_ka} / {fmt(ka.get('req_p99_ms'), 3)} "
              f"| {fmt(lat.get('req_p50_ms'), 3)}{add_lat} / {fmt(lat.get('req_p99_ms'), 3)} "
              f"| {fmt(ka.get('proxy_cpu_us_per_unit'), 1) if t != 'direct' else '–'} "
              f"| {fmt(new.get('rps'), 0)} | {fmt(new.get('conn_p50_ms'), 2)}{add_new} / {fmt(new.get('conn_p99_ms'), 2)} "
              f"| {fmt(new.get('proxy_cpu_us_per_unit'), 0) if t != 'direct' else '–'} "
              f"| {(fmt(ka.get('proxy_oncpu_pct'), 0) + ' / ' + fmt(ka.get('proxy_runqueue_wait_pct'), 0)) if t != 'direct' else '–'} "
              f"| {fmt(idle['rss_per_conn_kib'], 1) + ' (' + fmt(idle['pss_per_conn_kib'], 1) + ')' if idle else '–'} "
              f"| {errs} |")
    print()
    print(f"direct = the origin with no proxy (its CPU: {fmt(d['ka'].get('upstream_cpu_us_per_unit'), 1)} µs/request, "
          f"{fmt(d['new'].get('upstream_cpu_us_per_unit'), 0)} µs/connection; "
          f"the client's: {fmt(d['ka'].get('client_cpu_us_per_unit'), 1)} µs/request, "
          f"{fmt(d['new'].get('client_cpu_us_per_unit'), 0)} µs/connection).")
    print("origin TLS handshakes per client connection in \"new\": " + ", ".join(
        f"{t} {fmt(summary[t]['new'].get('origin_handshakes_per_conn'), 2)}" for t in targets
        if summary[t].get("new")))
    for name, r in ratios.items():
        print(f"{name}: keep-alive req/s x{r['ka_rps']:.2f}, new conn/s x{r['new_conns_per_s']:.2f}, "
              f"single-connection p50 x{r['lat_p50']:.2f}, proxy CPU/request x{r['ka_proxy_cpu_per_request']:.2f}, "
              f"proxy CPU/connection x{r['new_proxy_cpu_per_conn']:.2f}"
              + (f", idle RSS/conn x{r['idle_rss_per_conn']:.2f}" if "idle_rss_per_conn" in r else ""))
    targets_report = {}
    if "airlock" in proxies:
        a = summary["airlock"]
        if "airlock/mitmproxy" in ratios:
            targets_report["ka_rps_vs_mitmproxy >= 10x"] = ratios["airlock/mitmproxy"]["ka_rps"]
        if "airlock/squid" in ratios:
            targets_report["ka_rps_vs_squid >= 1.5x"] = ratios["airlock/squid"]["ka_rps"]
        targets_report["added_p50_ms_single_keepalive < 1"] = a["lat"].get("added_p50_ms")
        if "idle" in a:
            targets_report["idle_rss_kib_per_conn < 32"] = a["idle"]["rss_per_conn_kib"]
        for peer in ("squid", "mitmproxy"):
            if f"airlock/{peer}" in ratios:
                targets_report[f"ka_requests_per_proxy_cpu_second_vs_{peer} (CPU efficiency)"] = (
                    1 / ratios[f"airlock/{peer}"]["ka_proxy_cpu_per_request"])
        print("targets (reported, not asserted): " + "; ".join(
            f"{k}: {fmt(v, 2)}" for k, v in targets_report.items()))

    doc = {
        "benchmark": "gateway",
        "meta": meta,
        "versions": versions,
        "squid_conf": squid_conf,
        "summary": summary,
        "ratios": ratios,
        "targets": targets_report,
        "log_checks": checks,
        "runs": runs,
    }
    with open(out_json, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
