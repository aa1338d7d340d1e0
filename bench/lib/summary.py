#!/usr/bin/env python3
"""Prints one table from the result files of one `bench/run` and writes run-<stamp>.json.

    summary.py OUT.json socket.json scale.json storm.json singleflight.json micro.json standin.json stormalone.json
               standinqueue.json [oneshot.json]  (any may be "-")
"""
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tokendbench import host_info


def load(path):
    if path in ("-", "") or not Path(path).exists():
        return None
    return json.loads(Path(path).read_text())


def yes(ok):
    return "yes" if ok else "NO"


def socket_section(d):
    print("Socket path: ProvideTokenReplacement, cached token (median run; floor = C echo server, same bytes)")
    dev = d.get("tokend_dev_bin")
    head = f"  {'row':24} {'tokend r/s':>11} {'p50':>7} {'p99':>7} {'p99.9':>8} | {'floor r/s':>10} {'p99':>7} {'p99.9':>8} | {'ratio':>5}"
    if dev:
        head += f" | {'dev r/s':>9} {'p99':>7} {'ratio':>5}"
    print(head + "  target")
    for r in d["rows"]:
        t, f = r["tokend"], r["floor"]
        target = ""
        if r["row"].startswith("persistent-c"):
            ok = r["ratio_rps"] >= 0.75 and t["p99_us"] <= 2 * f["p99_us"]
            target = f"ratio >= 0.75, p99 <= 2x floor ({t['p99_us'] / max(f['p99_us'], 1):.1f}x): {yes(ok)}"
        name = f"{r['mode']} / {r['connections']}"
        line = (f"  {name:24} {t['requests_per_sec']:>11.0f} {t['p50_us']:>7.1f} {t['p99_us']:>7.1f} {t['p999_us']:>8.1f} |"
                f" {f['requests_per_sec']:>10.0f} {f['p99_us']:>7.1f} {f['p999_us']:>8.1f} | {r['ratio_rps']:>5.2f}")
        if dev and "dev" in r:
            line += f" | {r['dev']['requests_per_sec']:>9.0f} {r['dev']['p99_us']:>7.1f} {r['dev_ratio_rps']:>5.2f}"
        print(f"{line}  {target}")
    print("  (latencies in µs; request %s B, reply %s B; %s requests or %s s per run, median of %s)" % (
        d["request_bytes"], d["reply_bytes"], d["settings"]["requests"], d["settings"]["duration_s"], d["settings"]["repeat"]))
    print(f"  tokend = the shipped build ({d.get('tokend_bin')})" + (f"; dev = {dev}" if dev else ""))


def scale_section(d):
    print("Scale: N stored credentials (start = process start -> first answered call)")
    print(f"  {'tokens':7} {'N':>8} {'ready s':>8} {'RSS MiB':>8} {'RSS asked':>9} {'1st asks/s':>10} {'idle CPU %':>10}"
          f" {'Status 1 p50 ms':>15} {'Status all ms':>13}  target (1M opaque)")
    for r in d["rows"]:
        target = ""
        if r["size"] == 1_000_000 and r["token_kind"] == "opaque":
            target = (f"ready<3s {yes(r['ready_s'] < 3)}, RSS<1GiB {yes(max(r['rss_ready_mib'], r['rss_after_asking_everyone_mib']) < 1024)},"
                      f" idle<0.5% {yes(r['idle_cpu_pct'] < 0.5)}")
        print(f"  {r['token_kind']:7} {r['size']:>8} {r['ready_s']:>8.2f} {r['rss_ready_mib']:>8.0f} {r['rss_after_asking_everyone_mib']:>9.0f}"
              f" {r['ask_everyone_per_s']:>10} {r['idle_cpu_pct']:>10.3f} {r['status']['one_user']['p50_ms']:>15.3f}"
              f" {r['status']['all_users']['p50_ms']:>13.0f}  {target}")


def storm_section(d):
    r = d["row"]
    print(f"Refresh storm: {r['credentials']} credentials due at once, real test IdP ({r['idp_workers']} gunicorn workers), cap {r['max_grants_in_flight_cap']}")
    print(f"  all refreshed after {r['seconds_until_all_refreshed']:.1f} s, {r['grants']} grants, {r['grants_per_s']} grants/s;"
          f" IdP CPU {r['idp_cpu_ms_per_grant']:.1f} ms/grant")
    net = r.get("tokend_net_cpu_ms_per_grant", r["tokend_cpu_ms_per_grant"])
    print(f"  tokend CPU {r['tokend_cpu_ms_per_grant']:.3f} ms/grant gross, {net:.3f} ms/grant net of serving the"
          f" {r['client']['rate_per_s']}/s client ({r.get('client_only_cpu_ms_per_s', 0):.1f} ms/s alone)"
          f" (target < 0.5: {yes(net < 0.5)})")
    c = r["client"]
    print(f"  most in flight {r['max_in_flight_seen']} (cap respected: {yes(r['cap_respected'])});"
          f" client during the storm: {c['replies']} replies, {c['errors']} errors,"
          f" {c['expired_tokens_served']} expired tokens served (target 0: {yes(c['expired_tokens_served'] == 0)})")


def stormalone_section(d):
    r = d["row"]
    print(f"Refresh storm, the grants alone (no client): {r['credentials']} credentials, {r['grants_per_s']} grants/s,"
          f" tokend CPU {r['tokend_cpu_ms_per_grant']:.3f} ms/grant (target < 0.5: {yes(r['tokend_cpu_ms_per_grant'] < 0.5)}),"
          f" IdP CPU {r['idp_cpu_ms_per_grant']:.1f} ms/grant, most in flight {r['max_in_flight_seen']} (cap {r['max_grants_in_flight_cap']})")


def standin_section(d, how="answered as requests come: answers arrive in bursts"):
    r = d["row"]
    net = r.get("tokend_net_cpu_ms_per_grant", r["tokend_cpu_ms_per_grant"])
    print(f"  diagnostic, stand-in token endpoint {how}:"
          f" {r['credentials']} credentials, {r['grants_per_s']} grants/s, tokend CPU {net:.3f} ms/grant")


def standinqueue_section(d):
    standin_section(d, "answering one request at a time: answers arrive one by one")


def singleflight_section(d):
    r = d["row"]
    lat = r["latency"]
    print(f"Single flight: {r['callers']} concurrent callers, one credential due: {r['grants']} grant(s) (target 1: {yes(r['grants'] == 1)}),"
          f" {r['replies']} replies, {r['errors']} errors")
    print(f"  caller latency ms: min {lat['min_ms']} p50 {lat['p50_ms']} p90 {lat['p90_ms']} p99 {lat['p99_ms']} max {lat['max_ms']}")


def micro_section(d):
    print("Micro-benchmarks (package-benchmark, p50 per operation)")
    for b in d.get("benchmarks", []):
        print(f"  {b['name']:68} {b.get('time', '?'):>12} {b.get('mallocs', '?'):>10} mallocs")


def oneshot_section(d):
    o = d["oidc_agent"]
    s = d["settings"]
    agent = o.get("version", "oidc-agent") if o["available"] else f"oidc-agent: not available ({o['reason']})"
    print(f"One-shot CLI and connection per request: tokend vs {agent} vs C floor"
          f" (same run; load average at start {' '.join(f'{x:.2f}' for x in d.get('loadavg_start', []))})")
    print(f"  one-shot wall time ({s['runs']} runs, {s['oneshot_timer']}):")
    for name, r in d["oneshot"].items():
        print(f"    {name:20} median {r['median_ms']:>7.3f} ms   p90 {r['p90_ms']:>7.3f} ms")
    t = d["oneshot_target"]
    if t["tokenctl_over_oidc_token_median"] is not None:
        print(f"    tokenctl / oidc-token (median) = {t['tokenctl_over_oidc_token_median']:.2f}"
              f" (target <= 1: {yes(t['met'])})")
    else:
        print("    tokenctl / oidc-token: no oidc-token to compare with")
    print(f"  connection per request, req/s ({s['duration_s']} s per point; server CPU µs/req in brackets):")
    print(f"    {'clients':>7} {'tokend':>16} {'oidc-agent':>16} {'(liboidc-agent)':>16} {'C floor':>16} {'tokend/floor':>12}"
          f" {'tokend/agent':>12}  target")
    for r in d["connection_per_request"]:
        def cell(k):
            x = r.get(k)
            if not x:
                return "-"
            bad = "!" if x.get("errors") or x.get("io_failures") or x.get("mismatches") or x.get("exit") else ""
            return f"{x['requests_per_sec']:.0f} [{x.get('server_cpu_us_per_req', 0):.0f}]{bad}"
        # Judged against oidc-agent driven the cheapest way (its plain-JSON IPC), when measured.
        agent = r.get("oidc_agent_plain") or r.get("oidc_agent") or {}
        t, a, f = r["tokend"]["requests_per_sec"], agent.get("requests_per_sec"), r["floor"]["requests_per_sec"]
        target = f"tokend/agent >= 1.5: {yes(t >= 1.5 * a)}" if a else ""
        print(f"    {r['clients']:>7} {cell('tokend'):>16} {cell('oidc_agent_plain'):>16} {cell('oidc_agent'):>16} {cell('floor'):>16}"
              f" {t / f if f else 0:>12.2f} {(f'{t / a:.2f}' if a else '-'):>12}  {target}")
    print(f"    (! = errors/mismatches/transport failures; IdP token POSTs while measuring: {d['idp_token_posts_during_measurement']})")
    rows = d["connection_per_request"]
    if rows and "nio_floor" in rows[0]:
        # What any SwiftNIO server pays per connection: the floor tokend's accept path is built on.
        print("  SwiftNIO's floor (nio-floor: canned replies on NIO's ServerBootstrap, tokend's child options), same run:")
        print(f"    {'clients':>7} {'nio-floor':>16} {'+ peer creds':>16} {'nio/agent':>10} {'+peer/agent':>12} {'tokend/nio+peer':>16}")
        for r in rows:
            agent = (r.get("oidc_agent_plain") or r.get("oidc_agent") or {}).get("requests_per_sec")
            n, p, t = (r.get(k, {}).get("requests_per_sec") for k in ("nio_floor", "nio_floor_peer", "tokend"))
            def cell(x):
                return f"{x['requests_per_sec']:.0f} [{x.get('server_cpu_us_per_req', 0):.0f}]" if x else "-"
            def ratio(a, b):
                return f"{a / b:.2f}" if a and b else "-"
            print(f"    {r['clients']:>7} {cell(r.get('nio_floor')):>16} {cell(r.get('nio_floor_peer')):>16}"
                  f" {ratio(n, agent):>10} {ratio(p, agent):>12} {ratio(t, p):>16}")


def main():
    out, paths = sys.argv[1], sys.argv[2:]
    names = ["socket", "scale", "storm", "singleflight", "micro", "standin", "stormalone", "standinqueue", "oneshot"]
    order = ["socket", "oneshot", "scale", "storm", "stormalone", "standin", "standinqueue", "singleflight", "micro"]
    data = {n: load(p) for n, p in zip(names, paths)}
    print()
    print("tokend benchmarks — %s, %s CPUs (%s), load average %s" % (
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), host_info()["cpus"], host_info()["cpu_model"],
        " ".join(f"{x:.2f}" for x in host_info()["loadavg"])))
    sections = {"socket": socket_section, "scale": scale_section, "storm": storm_section,
                "singleflight": singleflight_section, "micro": micro_section, "standin": standin_section,
                "stormalone": stormalone_section, "standinqueue": standinqueue_section, "oneshot": oneshot_section}
    for n in order:
        if data.get(n):
            if n not in ("stormalone", "standin", "standinqueue"):  # these continue the storm's lines
                print()
            sections[n](data[n])
    Path(out).write_text(json.dumps({"kind": "tokend-bench-run", "host": host_info(),
                                     "parts": {n: p for n, p in zip(names, paths) if p not in ("-", "")}}, indent=1) + "\n")
    print()
    print(f"results: {out}")


if __name__ == "__main__":
    main()
