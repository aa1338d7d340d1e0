#!/usr/bin/env python3
"""Fleet benchmark: one PostgreSQL and three tokend nodes on this machine sharing a store of
10,000, 100,000 and 1,000,000 credentials.

For each size and token kind (40-byte opaque tokens; 1 KiB JWTs, by default at 100,000):

  standing  tokend-storegen --postgres writes the store (the real schema, row tags and
            generations, tokens not due for a day); the nodes start one after the other (each
            timed from process start to the first answered GetInfo, RSS when ready); every
            credential is asked once on every node (RSS after); idle CPU of each node and of
            PostgreSQL; Status for one user; propagation: a forced refresh on node A reaching a
            Watch client on node C; 2,000 AddCredential calls through node A (the cost of an
            add as the table grows); node A restarted (its floors already on disk); table and
            index size per credential.
  wave      the store is written again, every credential due within a window: issued so that
            its refresh point (refresh_at = 0.5 of a lifetime of 1,200 s, 3,600 s from 100,000)
            falls at one moment T, which tokend's jitter (up to 5 % of the lifetime earlier)
            spreads over [T - 60 s, T] (T - 180 s from 100,000). While the nodes refresh, a
            client asks random credentials on random nodes (--client-rate) and checks the expiry
            each token carries itself. Reported: grants/s across the fleet, grants per
            credential (counted at the endpoint: must be exactly 1), tokend and PostgreSQL CPU
            per grant (gross, and net of what serving the client alone costs, measured after the
            wave), the endpoint's own CPU per grant (to subtract), what each statement costs the
            database per grant (pg_stat_statements; the lease's share), expired tokens served,
            dead tuples, autovacuum runs and table growth during the wave.
  kill      the same wave, with node B SIGKILLed when 40 % of the credentials are refreshed:
            how long until every credential whose lease it held is refreshed by another node,
            grants per credential, credentials left unrefreshed, marked in flight or needing
            reauthentication (must be 0). A grant B had in flight (its lease, and its marker in
            the row) may have reached the endpoint; the node that takes the lease over sends it
            again with the same refresh token. Reported: B's grants in flight at its death (from
            the rows), the credentials granted twice (at the endpoint: they must all be among
            those), and the grants the takers sent again (their logs).

The token endpoint is bench/floor/grant_endpoint.c (C, epoll): it answers refresh grants
without storage and counts them per credential; its CPU per grant is reported.

    bench/fleet.py [--sizes 10000,100000,1000000] [--jwt-sizes 100000] [--parts standing,wave,kill]
                   [--client-rate 200] [--idle 30] [--quick]

Needs root (PostgreSQL runs as the postgres user), Debian's postgresql-15, release tokend
(TOKEND_BIN), tokend-storegen (STOREGEN_BIN) and bench/.bin/grant_endpoint (make -C bench).
Every wait is bounded; every process it starts is stopped when it ends.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from fleetbench import (GRANT_ENDPOINT_BIN, PG_BIN, GrantEndpoint, Node, Postgres, WaveClient, add_credentials, node_config,
                        propagation)
from tokendbench import (Processes, Varlink, ask_everyone, distribution_ms, loadavg, log, peak_rss_mib, proc_cpu_seconds, rss_mib,
                         storegen_bin, tokend_bin, wait_ready, write_result)

NODES = ["node-a", "node-b", "node-c"]
# PostgreSQL as a fleet would run it on a small machine: durable commits (fsync and
# synchronous_commit on, the defaults), pg_stat_statements for the cost of each statement,
# every autovacuum run logged.
PG_SETTINGS = {
    "shared_buffers": "512MB",
    "max_connections": "100",
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.max": "1000",
    "log_autovacuum_min_duration": "0",
    "log_checkpoints": "on",
    "log_line_prefix": "%m ",
}
TARGETS = {"ready_s": 5.0, "rss_mib": 1024.0, "cpu_ms_per_grant": 2.0, "propagation_p99_ms": 1000.0}
KINDS = {"opaque": ["--token-bytes", "40"], "jwt": ["--jwt-bytes", "1024"]}


def storegen(pg, database, state, key, count, kind, expires_in, issued_ago, timeout):
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o700)
    start = time.monotonic()
    r = subprocess.run([str(storegen_bin()), "--postgres", pg.url(database), "--password-file", str(pg.password_file),
                        "--state-dir", str(state), "--key-file", str(key), "--count", str(count), "--provider", "fleet",
                        "--reader", "uid:0", "--traceable", "--expires-in", str(expires_in), "--issued-ago", str(issued_ago),
                        "--batch", "20000", *KINDS[kind]],
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"tokend-storegen failed: {r.stderr.strip()[-800:]}")
    return time.monotonic() - start


def table_sizes(pg, database):
    rows = pg.rows("""SELECT relname, pg_relation_size(relid), pg_indexes_size(relid), pg_total_relation_size(relid),
                             n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, autovacuum_count, autoanalyze_count
                      FROM pg_stat_user_tables WHERE relname IN ('tokend_credentials', 'tokend_leases')""", database)
    out = {}
    for name, heap, index, total, live, dead, upd, hot, av, aa in rows:
        out[name] = {"heap_bytes": int(heap), "index_bytes": int(index), "total_bytes": int(total), "live_tuples": int(live),
                     "dead_tuples": int(dead), "updates": int(upd), "hot_updates": int(hot), "autovacuum_runs": int(av),
                     "autoanalyze_runs": int(aa)}
    return out


def statement_costs(pg, database, grants):
    """What each statement cost the database during the wave, per grant, from pg_stat_statements."""
    rows = pg.rows("""SELECT calls, total_exec_time, rows, regexp_replace(left(query, 400), '\\s+', ' ', 'g')
                      FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
                      WHERE d.datname = current_database() ORDER BY total_exec_time DESC LIMIT 40""", database)
    statements, lease_ms, lease_calls, total_ms, total_calls = [], 0.0, 0, 0.0, 0
    for calls, ms, nrows, query in rows:
        calls, ms = int(calls), float(ms)
        total_ms += ms
        total_calls += calls
        is_lease = "tokend_leases" in query and "FROM tokend_leases WHERE holder IS NOT NULL" not in query
        if is_lease:
            lease_ms += ms
            lease_calls += calls
        statements.append({"query": query[:160], "calls": calls, "calls_per_grant": round(calls / max(1, grants), 3),
                           "exec_ms_per_grant": round(ms / max(1, grants), 4), "lease": is_lease})
    return {"statements": statements[:15], "exec_ms_per_grant": round(total_ms / max(1, grants), 4),
            "statements_per_grant": round(total_calls / max(1, grants), 2),
            "lease_exec_ms_per_grant": round(lease_ms / max(1, grants), 4),
            "lease_statements_per_grant": round(lease_calls / max(1, grants), 2)}


class Fleet:
    def __init__(self, args, procs, pg, tmp, key, database, endpoint, refresh_at, tag):
        self.nodes = []
        for name in NODES:
            directory = tmp / f"{tag}-{name}"
            directory.mkdir(parents=True, exist_ok=True)
            config = node_config(directory, name, key, pg, database, endpoint.token_endpoint, args.lease, args.reconcile,
                                 args.grants_in_flight, refresh_at)
            self.nodes.append(Node(name, directory, config, tokend_bin()))
        self.procs = procs

    def start(self, timeout):
        """Starts the nodes one after the other; each timed to its first answered GetInfo."""
        rows = []
        for node in self.nodes:
            p = node.start(self.procs)
            ready_s = wait_ready(node.sock, p, timeout=timeout)
            rows.append({"node": node.name, "ready_s": round(ready_s, 3), "rss_ready_mib": round(rss_mib(p.pid), 1),
                         "peak_rss_at_ready_mib": round(peak_rss_mib(p.pid), 1),
                         "cpu_s_until_ready": round(proc_cpu_seconds(p.pid), 3)})
            log(f"{node.name}: ready in {ready_s:.3f} s, RSS {rows[-1]['rss_ready_mib']:.0f} MiB")
        return rows

    def cpu(self):
        return sum(proc_cpu_seconds(n.proc.pid) for n in self.nodes if n.proc and n.proc.poll() is None)

    def stop(self):
        for node in self.nodes:
            if node.proc:
                self.procs.stop(node.proc, timeout=60)


def standing(args, procs, pg, tmp, key, size, kind):
    database = f"standing_{kind}_{size}"
    pg.psql(f"CREATE DATABASE {database}")
    pg.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", database)
    log(f"standing {kind} {size}: writing the store")
    gen_s = storegen(pg, database, tmp / f"gen-{database}", key, size, kind, 86400, 0, timeout=3600)
    log(f"standing {kind} {size}: {size} credentials written in {gen_s:.1f} s ({size / gen_s:.0f}/s)")
    endpoint = GrantEndpoint(procs, tmp, 3600, jwt_bytes=1024 if kind == "jwt" else 0)
    fleet = Fleet(args, procs, pg, tmp, key, database, endpoint, 0.8, f"s{size}{kind}")
    sizes_before = table_sizes(pg, database)
    load_before = loadavg()
    try:
        nodes = fleet.start(timeout=600)
        for node, row in zip(fleet.nodes, nodes):
            ask_s, ask_errors = ask_everyone(node.sock, size, 512)
            row.update({"ask_everyone_s": round(ask_s, 2), "ask_everyone_per_s": round(size / ask_s), "ask_errors": ask_errors,
                        "rss_after_asking_everyone_mib": round(rss_mib(node.proc.pid), 1)})
            log(f"{node.name}: asked everyone in {ask_s:.2f} s, {ask_errors} errors, RSS {row['rss_after_asking_everyone_mib']:.0f} MiB")
        time.sleep(1)
        cpu0 = [proc_cpu_seconds(n.proc.pid) for n in fleet.nodes]
        pg0, t0 = pg.cpu_seconds(), time.monotonic()
        time.sleep(args.idle)
        wall = time.monotonic() - t0
        for node, row, before in zip(fleet.nodes, nodes, cpu0):
            row["idle_cpu_pct"] = round(100 * (proc_cpu_seconds(node.proc.pid) - before) / wall, 3)
        pg_idle = round(100 * (pg.cpu_seconds() - pg0) / wall, 3)
        log(f"idle CPU: nodes {[r['idle_cpu_pct'] for r in nodes]} %, PostgreSQL {pg_idle} %")
        width = len(str(size - 1))
        c = Varlink(fleet.nodes[0].sock, timeout=60)
        one = []
        for i in range(args.status_one):
            t = time.monotonic()
            r = c.call("io.tokend.TokenProvider.Status", {"userIdentifier": f"user-{(i * 7919) % size:0{width}d}"})
            one.append(time.monotonic() - t)
            if "error" in r:
                raise RuntimeError(f"Status: {r}")
        c.close()
        users = [f"user-{(i * 104729) % size:0{width}d}" for i in range(min(args.propagation, size))]
        after_answer, after_call, misses = propagation(fleet.nodes[0].sock, fleet.nodes[2].sock, users)
        log(f"propagation A -> C: p50 {distribution_ms(after_answer)['p50_ms']} ms, p99 {distribution_ms(after_answer)['p99_ms']} ms, "
            f"{misses} missed")
        add_s, add_errors = add_credentials(fleet.nodes[0].sock, args.adds)
        log(f"{args.adds} AddCredential through node-a in {add_s:.2f} s ({args.adds / add_s:.0f}/s), {add_errors} errors")
        # Node A again, as after a reboot or an upgrade: its floors are already on disk.
        first = fleet.nodes[0]
        procs.stop(first.proc, timeout=60)
        p = first.start(procs)
        restart_s = wait_ready(first.sock, p, timeout=600)
        restart = {"ready_s": round(restart_s, 3), "rss_ready_mib": round(rss_mib(p.pid), 1),
                   "cpu_s_until_ready": round(proc_cpu_seconds(p.pid), 3)}
        log(f"node-a restarted: ready in {restart_s:.3f} s, RSS {restart['rss_ready_mib']:.0f} MiB")
        sizes = table_sizes(pg, database)
        credentials = sizes["tokend_credentials"]
        row = {
            "restart_node_a": restart,
            "size": size, "token_kind": kind, "store_generation_s": round(gen_s, 1), "nodes": nodes,
            "postgres_idle_cpu_pct": pg_idle, "status_one_user": distribution_ms(one),
            "propagation_after_answer": distribution_ms(after_answer), "propagation_after_call": distribution_ms(after_call),
            "propagation_missed": misses, "adds": args.adds, "add_s": round(add_s, 2), "adds_per_s": round(args.adds / add_s),
            "add_errors": add_errors, "tables_after_generation": sizes_before, "tables": sizes,
            "credential_bytes_per_row": round(credentials["total_bytes"] / max(1, credentials["live_tuples"] or size), 1),
            "loadavg_before": load_before, "loadavg_after": loadavg(),
        }
        if size == 1_000_000 and kind == "opaque":
            row["targets_met"] = all(n["ready_s"] <= TARGETS["ready_s"] and max(n["rss_ready_mib"], n["rss_after_asking_everyone_mib"])
                                     <= TARGETS["rss_mib"] for n in nodes)
        row["propagation_target_met"] = row["propagation_after_answer"]["p99_ms"] <= TARGETS["propagation_p99_ms"] and misses == 0
        return row
    finally:
        fleet.stop()
        procs.stop(endpoint.proc)


def wave(args, procs, pg, tmp, key, size, kind, kill, estimate):
    # The tokens a wave issues come due again after half their lifetime: that must outlast the
    # wave (at 100,000 on two vCPUs, about 11 min), or the second cycle counts as a second grant.
    lifetime = 3600 if size >= 100_000 else 1200
    jitter = lifetime // 20
    database = f"{'kill' if kill else 'wave'}_{kind}_{size}"
    pg.psql(f"CREATE DATABASE {database}")
    pg.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", database)
    # Nominal refresh point T = generation start + lead; the jitter makes it up to 5 % of the
    # lifetime earlier, so the lead leaves that, the generation and the start-up before it.
    lead = jitter + int(estimate["gen_s"] * 1.5 + 3 * estimate["ready_s"] * 2) + 30
    issued_ago = lifetime // 2 - lead
    t_gen = time.time()
    log(f"{database}: writing the store, due at {lead} s (window {jitter} s)")
    gen_s = storegen(pg, database, tmp / f"gen-{database}", key, size, kind, lifetime, issued_ago, timeout=3600)
    due_at = t_gen + lead
    endpoint = GrantEndpoint(procs, tmp, lifetime, jwt_bytes=1024 if kind == "jwt" else 0)
    fleet = Fleet(args, procs, pg, tmp, key, database, endpoint, 0.5, f"{database}")
    stop = threading.Event()
    client = None
    try:
        nodes = fleet.start(timeout=600)
        wave_opens = due_at - jitter
        if time.time() > wave_opens:
            log(f"warning: the nodes were ready {time.time() - wave_opens:.0f} s after the wave opened")
        endpoint.new_wave()
        pg.psql("SELECT pg_stat_statements_reset()", database)
        pg.psql("SELECT pg_stat_reset()", database)
        sizes_before = table_sizes(pg, database)
        log_offset = pg.log_size()
        width = len(str(size - 1))
        users = [f"user-{i:0{width}d}" for i in range(size)]
        client = WaveClient(fleet.nodes, users, args.client_rate, stop)
        client.start()
        load_before = loadavg()
        # Wait for the first grant (bounded: the wave opens at `wave_opens`).
        deadline = time.monotonic() + max(0, wave_opens - time.time()) + 120
        while endpoint.stats()["grants"] == 0:
            if time.monotonic() > deadline:
                raise RuntimeError("no grant within 120 s of the wave's opening")
            time.sleep(0.05)
        t_first = time.monotonic()
        cpu0, pg0, ep0 = fleet.cpu(), pg.cpu_seconds(), endpoint.stats()
        progress, killed, kill_info = [], None, {}
        timeout = max(600, size / 50)
        while True:
            stats = endpoint.stats()
            granted = stats["wave"]["credentials_granted"]
            now = time.monotonic()
            progress.append((round(now - t_first, 2), granted))
            if granted >= size:
                break
            if now - t_first > timeout:
                log(f"wave not complete after {timeout:.0f} s: {granted}/{size}")
                break
            if kill and killed is None and granted >= 0.4 * size:
                victim = fleet.nodes[1]
                os.kill(victim.proc.pid, signal.SIGKILL)
                victim.proc.wait(30)
                killed = time.monotonic()
                held = [r[0] for r in pg.rows(
                    "SELECT user_identifier FROM tokend_leases WHERE holder = 'node-b' AND expires_at > tokend_now_ms()", database)]
                marked = int(pg.psql(
                    "SELECT count(*) FROM tokend_credentials WHERE grant_started_at IS NOT NULL", database))
                # B's grants in flight at its death: its leases whose row carries a grant's marker
                # (written before the request is sent, so each may or may not have reached the endpoint).
                in_flight = [r[0] for r in pg.rows(
                    """SELECT c.user_identifier FROM tokend_credentials c JOIN tokend_leases l USING (user_identifier)
                       WHERE l.holder = 'node-b' AND l.expires_at > tokend_now_ms() AND c.grant_started_at IS NOT NULL""",
                    database)]
                kill_info = {"killed_at_granted": granted, "leases_held_by_killed_node": len(held),
                             "grants_in_flight_on_killed_node": len(in_flight),
                             "credentials_marked_in_flight_at_kill": marked}
                (tmp / f"{database}-held.txt").write_text("\n".join(held))
                (tmp / f"{database}-in-flight.txt").write_text("\n".join(in_flight))
                pg.psql("CREATE TABLE fleet_held AS SELECT user_identifier FROM tokend_leases "
                        "WHERE holder = 'node-b' AND expires_at > tokend_now_ms()", database)
                log(f"killed node-b at {granted}/{size}: it held {len(held)} leases")
            if killed is not None and "takeover_s" not in kill_info and kill_info["leases_held_by_killed_node"] > 0:
                left = int(pg.psql(
                    """SELECT count(*) FROM tokend_credentials WHERE user_identifier IN (SELECT user_identifier FROM fleet_held)
                        AND (refresh_count = 0 OR grant_started_at IS NOT NULL)""", database))
                if left == 0:
                    kill_info["takeover_s"] = round(time.monotonic() - killed, 2)
            time.sleep(0.25 if size <= 100_000 else 1.0)
        t_done = time.monotonic()
        wall = t_done - t_first
        cpu_wave, pg_wave = fleet.cpu() - cpu0, pg.cpu_seconds() - pg0
        ep1 = endpoint.stats()
        grants = ep1["grants"]
        # What serving the client alone costs, nothing due any more.
        time.sleep(2)
        b_cpu0, b_pg0, b_t0 = fleet.cpu(), pg.cpu_seconds(), time.monotonic()
        time.sleep(args.baseline)
        b_wall = time.monotonic() - b_t0
        base_cpu, base_pg = (fleet.cpu() - b_cpu0) / b_wall, (pg.cpu_seconds() - b_pg0) / b_wall
        stop.set()
        client.join(30)
        if kill and killed is not None and "takeover_s" not in kill_info:
            left = int(pg.psql(
                """SELECT count(*) FROM tokend_credentials WHERE user_identifier IN (SELECT user_identifier FROM fleet_held)
                   AND (refresh_count = 0 OR grant_started_at IS NOT NULL)""", database))
            kill_info["takeover_s"] = None if left else round(t_done - killed, 2)
        final = endpoint.stats()
        more = endpoint.granted_more_than_once()
        held = set((tmp / f"{database}-held.txt").read_text().split()) if kill and killed else set()
        checks = pg.rows("""SELECT count(*) FILTER (WHERE state <> 'valid'), count(*) FILTER (WHERE grant_started_at IS NOT NULL),
                                   count(*) FILTER (WHERE refresh_count = 0), count(*) FROM tokend_credentials""", database)[0]
        statements = statement_costs(pg, database, grants)
        sizes_after = table_sizes(pg, database)
        autovacuum = [line for line in pg.log_lines_since(log_offset) if "automatic vacuum" in line or "automatic analyze" in line]
        checkpoints = [line for line in pg.log_lines_since(log_offset) if "checkpoint complete" in line]
        node_rss = {n.name: round(rss_mib(n.proc.pid), 1) for n in fleet.nodes if n.proc and n.proc.poll() is None}
        tokend_ms = 1000 * cpu_wave / max(1, grants)
        pg_ms = 1000 * pg_wave / max(1, grants)
        net_tokend = 1000 * max(0.0, cpu_wave - base_cpu * wall) / max(1, grants)
        net_pg = 1000 * max(0.0, pg_wave - base_pg * wall) / max(1, grants)
        endpoint_ms = 1000 * ((final["cpu_user_s"] + final["cpu_system_s"]) - (ep0["cpu_user_s"] + ep0["cpu_system_s"])) / max(1, grants)
        row = {
            "size": size, "token_kind": kind, "lifetime_s": lifetime, "window_s": jitter, "store_generation_s": round(gen_s, 1),
            "nodes": nodes, "grants": final["grants"], "credentials_granted": final["wave"]["credentials_granted"],
            "granted_once": final["wave"]["granted_once"], "granted_more_than_once": final["wave"]["granted_more_than_once"],
            "most_grants_per_credential": final["wave"]["most_grants"], "replays": final["replays"], "stale_refused": final["stale"],
            "more_than_once_sample": more[:10],
            "wave_s": round(wall, 2), "grants_per_s": round(final["wave"]["credentials_granted"] / max(0.001, wall), 1),
            "refreshed_per_node": {n.name: n.refreshed() for n in fleet.nodes},
            "node_logs": {n.name: n.log_summary() for n in fleet.nodes},
            "tokend_cpu_ms_per_grant": round(tokend_ms, 4), "postgres_cpu_ms_per_grant": round(pg_ms, 4),
            "cpu_ms_per_grant": round(tokend_ms + pg_ms, 4),
            "client_only_tokend_cpu_ms_per_s": round(1000 * base_cpu, 2), "client_only_postgres_cpu_ms_per_s": round(1000 * base_pg, 2),
            "net_tokend_cpu_ms_per_grant": round(net_tokend, 4), "net_postgres_cpu_ms_per_grant": round(net_pg, 4),
            "net_cpu_ms_per_grant": round(net_tokend + net_pg, 4), "endpoint_cpu_ms_per_grant": round(endpoint_ms, 4),
            "database": statements, "tables_before": sizes_before, "tables_after": sizes_after,
            "autovacuum_runs": len(autovacuum), "autovacuum_log": autovacuum[:20], "checkpoints": len(checkpoints),
            "client": {"rate_per_s": args.client_rate, "replies": client.replies, "errors": client.errors,
                       "expired_tokens_served": client.expired, "unreachable": client.unreachable,
                       "latency": distribution_ms(client.latencies), "first_error": client.first_error},
            "after": {"not_valid": int(checks[0]), "marked_in_flight": int(checks[1]), "never_refreshed": int(checks[2]),
                      "credentials": int(checks[3])},
            "rss_after_wave_mib": node_rss, "progress": progress[:: max(1, len(progress) // 200)],
            "loadavg_before": load_before, "loadavg_after": loadavg(),
        }
        if kill:
            in_flight = set((tmp / f"{database}-in-flight.txt").read_text().split()) if killed else set()
            twice = {m["user"] for m in more}
            resent = set()
            for node in (fleet.nodes[0], fleet.nodes[2]):
                resent |= node.resent_grants()
            row["kill"] = kill_info | {
                "more_than_once_outside_killed_leases": sum(1 for m in more if m["user"] not in held),
                # The endpoint lists at most 50 credentials granted more than once.
                "granted_twice_listed": len(twice), "granted_twice_list_complete": len(twice) == row["granted_more_than_once"],
                "granted_twice_in_flight_on_killed_node": len(twice & in_flight),
                "granted_twice_not_in_flight_on_killed_node": len(twice - in_flight),
                "in_flight_on_killed_node_granted_once": len(in_flight - twice),
                "resent_by_takers": len(resent), "resent_not_in_flight_on_killed_node": len(resent - in_flight),
                "lease_s": args.lease,
            }
        row["one_grant_per_credential"] = (row["credentials_granted"] == size and
                                           (row["granted_more_than_once"] == 0 if not kill else
                                            row["kill"]["more_than_once_outside_killed_leases"] == 0
                                            and row["kill"]["granted_twice_list_complete"]
                                            and row["kill"]["granted_twice_not_in_flight_on_killed_node"] == 0))
        row["nothing_lost"] = row["after"]["not_valid"] == 0 and row["after"]["marked_in_flight"] == 0 and row["after"]["never_refreshed"] == 0
        log(f"{database}: {row['credentials_granted']}/{size} refreshed in {wall:.1f} s ({row['grants_per_s']}/s), "
            f"{row['granted_more_than_once']} more than once, CPU/grant tokend {tokend_ms:.3f} + PostgreSQL {pg_ms:.3f} ms "
            f"(net {net_tokend:.3f} + {net_pg:.3f}), expired served {client.expired}")
        return row
    finally:
        stop.set()
        if client:
            client.join(30)
        fleet.stop()
        procs.stop(endpoint.proc)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--jwt-sizes", default="100000", help="sizes also measured with 1 KiB JWTs ('' for none)")
    ap.add_argument("--parts", default="standing,wave,kill")
    ap.add_argument("--kill-sizes", default="10000,100000", help="sizes with the kill run")
    ap.add_argument("--idle", type=int, default=30)
    ap.add_argument("--status-one", type=int, default=200)
    ap.add_argument("--propagation", type=int, default=200, help="credentials refreshed on node A and watched on node C")
    ap.add_argument("--adds", type=int, default=2000)
    ap.add_argument("--client-rate", type=int, default=200)
    ap.add_argument("--baseline", type=float, default=10.0)
    ap.add_argument("--lease", default="30s")
    ap.add_argument("--reconcile", default="30s")
    ap.add_argument("--grants-in-flight", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="10,000 and 100,000 opaque, no JWTs, kill at 10,000, 5 s idle")
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.jwt_sizes, args.kill_sizes, args.idle, args.status_one, args.propagation = \
            "10000,100000", "", "10000", 5, 50, 50
    sizes = [int(s) for s in args.sizes.split(",") if s]
    jwt_sizes = [int(s) for s in args.jwt_sizes.split(",") if s]
    kill_sizes = [int(s) for s in args.kill_sizes.split(",") if s]
    parts = args.parts.split(",")
    for s in sizes + jwt_sizes:
        if not 100 <= s <= 2_000_000:
            sys.exit(f"fleet: bad size {s}")
    if os.geteuid() != 0:
        sys.exit("fleet: run as root (PostgreSQL is started as the postgres user)")
    for path in (tokend_bin(), storegen_bin(), GRANT_ENDPOINT_BIN, PG_BIN / "postgres"):
        if not os.access(path, os.X_OK):
            sys.exit(f"fleet: {path} not found; see bench/README.md (bench/run builds it)")
    tmp = Path(tempfile.mkdtemp(prefix="tokend-fleet."))
    os.chmod(tmp, 0o755)
    procs = Processes()
    pg = Postgres(procs, tmp / "pg", PG_SETTINGS)
    pg.start()
    key = tmp / "tokend.key"
    runs = [(s, "opaque") for s in sizes] + [(s, "jwt") for s in jwt_sizes]
    standing_rows, wave_rows, kill_rows = [], [], []
    try:
        for size, kind in runs:
            estimate = {"gen_s": size / 10_000, "ready_s": 1 + size / 100_000}
            if "standing" in parts:
                row = standing(args, procs, pg, tmp, key, size, kind)
                standing_rows.append(row)
                estimate = {"gen_s": row["store_generation_s"], "ready_s": max(n["ready_s"] for n in row["nodes"])}
            if "wave" in parts:
                wave_rows.append(wave(args, procs, pg, tmp, key, size, kind, False, estimate))
            if "kill" in parts and kind == "opaque" and size in kill_sizes:
                kill_rows.append(wave(args, procs, pg, tmp, key, size, kind, True, estimate))
    finally:
        procs.stop_all()
        pg.stop()
        if args.keep_tmp:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    out = write_result("fleet", {"tokend_bin": str(tokend_bin()), "postgres_settings": PG_SETTINGS, "targets": TARGETS,
                                 "lease": args.lease, "reconcile_interval": args.reconcile,
                                 "max_grants_in_flight": args.grants_in_flight,
                                 "standing": standing_rows, "wave": wave_rows, "kill": kill_rows})
    print_tables(standing_rows, wave_rows, kill_rows)
    print(f"results: {out}")
    ok = all(r["one_grant_per_credential"] and r["nothing_lost"] and r["client"]["expired_tokens_served"] == 0
             for r in wave_rows + kill_rows)
    return 0 if ok else 3


def print_tables(standing_rows, wave_rows, kill_rows):
    if standing_rows:
        print(f"{'kind':6} {'creds':>8} | {'ready s (a/b/c)':>20} {'RSS MiB':>15} {'RSS all':>15} {'idle %':>17} {'PG idle %':>9} | "
              f"{'Status1 p50 ms':>14} {'prop p50/p99 ms':>16} {'adds/s':>7} {'B/row':>6}")
        for r in standing_rows:
            n = r["nodes"]

            def joined(key, digits):
                return "/".join(f"{x[key]:.{digits}f}" for x in n)
            prop = r["propagation_after_answer"]
            print(f"{r['token_kind']:6} {r['size']:>8} | {joined('ready_s', 2):>20} {joined('rss_ready_mib', 0):>15} "
                  f"{joined('rss_after_asking_everyone_mib', 0):>15} {joined('idle_cpu_pct', 2):>17} {r['postgres_idle_cpu_pct']:>9.2f} | "
                  f"{r['status_one_user']['p50_ms']:>14.3f} {prop['p50_ms']:>7.1f}/{prop['p99_ms']:<8.1f} "
                  f"{r['adds_per_s']:>7} {r['credential_bytes_per_row']:>6.0f}")
    for title, rows in (("wave", wave_rows), ("kill", kill_rows)):
        if not rows:
            continue
        print(f"{title}: {'kind':6} {'creds':>8} | {'wave s':>7} {'grants/s':>9} {'1/cred':>6} {'>1':>4} | "
              f"{'tokend+PG ms/grant':>19} {'net':>12} {'endpoint':>8} {'lease ms':>8} | {'expired':>7} {'lost':>4} {'dead tup':>9} {'autovac':>7}")
        for r in rows:
            lost = r["after"]["not_valid"] + r["after"]["marked_in_flight"] + r["after"]["never_refreshed"]
            print(f"{title}: {r['token_kind']:6} {r['size']:>8} | {r['wave_s']:>7.1f} {r['grants_per_s']:>9.1f} "
                  f"{'yes' if r['one_grant_per_credential'] else 'NO':>6} {r['granted_more_than_once']:>4} | "
                  f"{r['tokend_cpu_ms_per_grant']:>8.3f}+{r['postgres_cpu_ms_per_grant']:<10.3f} "
                  f"{r['net_tokend_cpu_ms_per_grant']:>5.3f}+{r['net_postgres_cpu_ms_per_grant']:<6.3f} {r['endpoint_cpu_ms_per_grant']:>8.4f} "
                  f"{r['database']['lease_exec_ms_per_grant']:>8.4f} | {r['client']['expired_tokens_served']:>7} {lost:>4} "
                  f"{r['tables_after']['tokend_credentials']['dead_tuples']:>9} {r['autovacuum_runs']:>7}")
            if "kill" in r:
                k = r["kill"]
                print(f"       killed node-b at {k.get('killed_at_granted')}: it held {k.get('leases_held_by_killed_node')} leases,"
                      f" all refreshed elsewhere {k.get('takeover_s')} s after the kill (lease {k['lease_s']});"
                      f" more than once outside its leases: {k['more_than_once_outside_killed_leases']}")
                print(f"       granted twice: {r['granted_more_than_once']}, all of them grants in flight on node-b at its death:"
                      f" {'yes' if k['granted_twice_not_in_flight_on_killed_node'] == 0 and k['granted_twice_list_complete'] else 'NO'}"
                      f" (in flight on node-b: {k.get('grants_in_flight_on_killed_node')}, of which granted twice"
                      f" {k['granted_twice_in_flight_on_killed_node']}, once {k['in_flight_on_killed_node_granted_once']};"
                      f" sent again by the takers: {k['resent_by_takers']})")


if __name__ == "__main__":
    sys.exit(main())
