#!/usr/bin/env python3
"""One-shot CLI latency and connection-per-request throughput: tokend vs oidc-agent vs a C floor.

    bench/oneshot.py [--quick] [--runs 200] [--duration 3] [--clients "1 2 4 8 16 32 64"]

Same run, same machine, same test IdP (Tests/idp/idp.py serve --oidc):

1. tokend (release build) with a provider for the IdP's confidential client; `tokenctl add alice`
   from a minted token response. oidc-agent (Debian oidc-agent-cli) started headless by
   bench/oidc-agent-setup.sh, its account made by `oidc-gen --flow refresh` from another minted
   refresh token. Both hold a valid 1 h access token, so nothing is refreshed while measuring
   (the IdP's token POSTs are counted before and after to show it).
2. One-shot: wall time of `tokenctl token --socket S alice`, `oidc-token bench` and `/bin/true`
   (the process-spawn floor), and `tokenctl --version` (tokenctl's start-up alone, a diagnostic): hyperfine -N (no shell), --runs N, 10 warm-up runs, or, without
   hyperfine, a perf_counter_ns loop around subprocess.run. Median and p90. Target: tokenctl
   <= oidc-token. Then the credential helpers programs run per request — `tokenctl token`,
   `git-credential get`, `docker-credential-tokend get` (through its link), `google-credential`,
   `kube-credential` — each with its request on stdin from a file, timed by the perf_counter_ns
   loop ("oneshot_helpers").
3. Connection per request at C concurrent clients, each connect -> one request -> reply -> close:
   tokend: bench/.bin/loadgen --connection-per-request, ProvideTokenReplacement for alice (every
     reply checked for the access token);
   oidc-agent: bench/.bin/oidc_loadgen, liboidc-agent's getAgentTokenResponse() in C worker
     processes (the agent's IPC is encrypted per connection, so a raw-socket client cannot
     speak it; this is what oidc-token does per call);
   floor: bench/floor/echo_server --mode epoll, replies of tokend's reply size.
   Each point bounded by --duration seconds and a request cap. Server CPU (utime+stime of the
   server's process tree) and client CPU (this script's children) per request are recorded.

If oidc-agent cannot be set up, tokend and the floor are still measured and the JSON says
"oidc_agent": {"available": false, "reason": ...}. Writes oneshot-<stamp>.json to RESULTS_DIR.
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from tokendbench import (clean_up, BENCH_DIR, IDP_SCRIPT, Processes, read_ready, idp_provider_section, idp_python,
                         idp_token_posts, loadavg, log, percentile, tokend_bin, tree_cpu_seconds, wait_ready, write_config,
                         write_result)

BIN = BENCH_DIR / ".bin"
SCOPE = "openid offline_access read"
MSG = '{"method":"io.tokend.TokenProvider.ProvideTokenReplacement","parameters":{"userIdentifier":"alice"}}'


def tokenctl_bin():
    return Path(os.environ.get("TOKENCTL_BIN") or BENCH_DIR.parent / ".build-release/dist/tokenctl")


def nio_floor_bin():
    """SwiftNIO's floor (Benchmarks/Sources/nio-floor), if built: canned replies, served as tokend serves."""
    return Path(os.environ.get("NIO_FLOOR_BIN") or BENCH_DIR.parent / "Benchmarks/.build-bench/release/nio-floor")


def mint_one(idp_state):
    r = subprocess.run([str(idp_python()), str(IDP_SCRIPT), "mint", "--state-dir", str(idp_state), "--count", "1",
                        "--scope", SCOPE], check=True, capture_output=True, text=True, timeout=120)
    return r.stdout.strip().splitlines()[0]


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


# ------------------------------------------------------------------ one-shot latency

def oneshot_hyperfine(cmds, runs, env, tmp):
    out = tmp / "hyperfine.json"
    argv = ["hyperfine", "-N", "--runs", str(runs), "--warmup", "10", "--export-json", str(out), "--style", "none"]
    for name, cmd in cmds:
        argv += ["--command-name", name, " ".join(cmd)]
    p = subprocess.run(argv, env=env, timeout=600, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"hyperfine failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    outliers = "Statistical outliers" in p.stderr  # hyperfine's warning, kept in the JSON, not printed
    res = {}
    for r in json.loads(out.read_text())["results"]:
        times = sorted(t * 1000 for t in r["times"])
        res[r["command"]] = {"runs": len(times), "median_ms": round(percentile(times, 50), 3),
                             "p90_ms": round(percentile(times, 90), 3), "mean_ms": round(r["mean"] * 1000, 3),
                             "min_ms": round(times[0], 3), "max_ms": round(times[-1], 3),
                             "user_ms": round(r["user"] * 1000, 3), "system_ms": round(r["system"] * 1000, 3),
                             "failed_runs": sum(1 for c in r.get("exit_codes", []) if c),
                             "hyperfine_outlier_warning": outliers}
    return res, "hyperfine -N"


def oneshot_loop(cmds, runs, env, stdin_file=None):
    """stdin_file: every run reads this file on stdin (the credential helpers' requests)."""
    res = {}
    for name, cmd in cmds:
        def run():
            with open(stdin_file or os.devnull, "rb") as stdin:
                return subprocess.run(cmd, env=env, stdin=stdin, stdout=subprocess.DEVNULL, timeout=30)
        for _ in range(10):
            run()
        times, failed = [], 0
        for _ in range(runs):
            t0 = time.perf_counter_ns()
            p = run()
            times.append((time.perf_counter_ns() - t0) / 1e6)
            failed += p.returncode != 0
        times.sort()
        res[name] = {"runs": runs, "median_ms": round(percentile(times, 50), 3), "p90_ms": round(percentile(times, 90), 3),
                     "mean_ms": round(sum(times) / runs, 3), "min_ms": round(times[0], 3), "max_ms": round(times[-1], 3),
                     "failed_runs": failed}
    return res, "perf_counter_ns around subprocess.run"


# ------------------------------------------------------------------ connection per request

def run_point(argv, env, server_pid, timeout):
    cpu0, c0 = tree_cpu_seconds(server_pid), children_cpu()
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    cpu1, c1 = tree_cpu_seconds(server_pid), children_cpu()
    try:
        j = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        log(f"no result from {argv[0]} (exit {p.returncode}): {p.stderr.strip()[-500:]}")
        return {"requests": 0, "requests_per_sec": 0, "errors": 0, "io_failures": 1, "exit": p.returncode}
    n = max(j.get("requests", 0), 1)
    j["server_cpu_us_per_req"] = round((cpu1 - cpu0) * 1e6 / n, 2)
    j["client_cpu_us_per_req"] = round((c1 - c0) * 1e6 / n, 2)
    j["exit"] = p.returncode
    if p.returncode != 0:
        log(f"{argv[0]} exit {p.returncode}: {p.stderr.strip()[-300:]}")
    return j


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="50 one-shot runs, 1 s per point")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--max-requests", type=int, default=300000, help="request cap per point")
    ap.add_argument("--clients", default="1 2 4 8 16 32 64")
    ap.add_argument("--no-hyperfine", action="store_true", help="time one-shots with a Python loop")
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.duration = 50, 1
    clients = [int(c) for c in args.clients.split()]
    for b in (tokend_bin(), tokenctl_bin(), BIN / "loadgen", BIN / "echo_server"):
        if not os.access(b, os.X_OK):
            sys.exit(f"oneshot: {b} missing (build tokend/tokenctl, and `make -C bench`)")
    budget = int(len(clients) * 3 * (args.duration + 20) + args.runs * 3 + 300)  # lifetime cap of every server

    procs = Processes()
    tmp = Path(tempfile.mkdtemp(prefix="tokend-oneshot."))
    oidc_dir = tmp / "oidc"
    oidc = {"available": False, "reason": "not tried"}
    env = dict(os.environ)
    loadavg_start = loadavg()
    try:
        # ---- the IdP (OIDC discovery on, for oidc-agent)
        (tmp / "idp").mkdir()
        idp = procs.start(["timeout", str(budget), str(idp_python()), str(IDP_SCRIPT), "serve", "--port", "0",
                           "--state-dir", str(tmp / "idp"), "--oidc", "--workers", "2"],
                          tmp / "idp.log", stdout=subprocess.PIPE)
        idp_port = read_ready(idp, "the IdP", 120)
        issuer = f"http://127.0.0.1:{idp_port}/o"
        log(f"IdP ready, issuer {issuer}")

        # ---- tokend + alice
        state = tmp / "state"
        state.mkdir(mode=0o700)
        cfg = write_config(tmp, state, state / "tokend.key", idp_provider_section(tmp, f"{issuer}/token/"))
        sock = tmp / "tokend.sock"
        td = procs.start(["timeout", "--kill-after=10", str(budget), str(tokend_bin()), "--config", str(cfg)],
                         tmp / "tokend.log")
        wait_ready(str(sock), td, 60)
        tok_resp = mint_one(tmp / "idp")
        at = json.loads(tok_resp)["access_token"]
        subprocess.run([str(tokenctl_bin()), "add", "alice", "--socket", str(sock), "--provider", "idp"],
                       input=tok_resp, text=True, check=True, timeout=30, capture_output=True)
        got = subprocess.run([str(tokenctl_bin()), "token", "--socket", str(sock), "alice"], capture_output=True,
                             text=True, timeout=30)
        if got.returncode != 0 or got.stdout.strip() != at:
            raise RuntimeError(f"tokenctl token alice: exit {got.returncode}, {got.stdout!r} {got.stderr!r}")
        log(f"tokend ready (pid {td.pid} = timeout wrapper), alice added")

        # ---- oidc-agent + account "bench"
        agent_pid = None
        if not shutil.which("oidc-agent"):
            oidc["reason"] = "oidc-agent not installed (apt-get install oidc-agent-cli)"
        else:
            rt = json.loads(mint_one(tmp / "idp"))["refresh_token"]
            p = subprocess.run([str(BENCH_DIR / "oidc-agent-setup.sh"), "start", str(oidc_dir), issuer, rt, "bench",
                                str(budget)], capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                oidc["reason"] = "setup failed: " + (p.stderr.strip().splitlines() or ["?"])[-1]
            else:
                kv = dict(line.split("=", 1) for line in p.stdout.split() if "=" in line)
                env["OIDC_SOCK"] = kv["OIDC_SOCK"]
                agent_pid = int(kv["OIDC_AGENT_PID"])
                version = subprocess.run(["oidc-agent", "--version"], capture_output=True, text=True).stdout.strip()
                oidc = {"available": True, "version": version, "account": "bench", "socket": kv["OIDC_SOCK"]}
                if not os.access(BIN / "oidc_loadgen", os.X_OK):
                    oidc["throughput_reason"] = "bench/.bin/oidc_loadgen not built (needs liboidc-agent-dev)"
                log(f"oidc-agent ready ({version}), account bench")
        if not oidc["available"]:
            log(f"oidc-agent: not available ({oidc['reason']})")
        posts_before = idp_token_posts(tmp / "idp")

        # ---- 1. one-shot CLI latency
        cmds = [("/bin/true", ["/bin/true"]),
                ("tokenctl token", [str(tokenctl_bin()), "token", "--socket", str(sock), "alice"]),
                # diagnostic: tokenctl's start-up and argument parsing alone, no socket
                ("tokenctl --version", [str(tokenctl_bin()), "--version"])]
        if oidc["available"]:
            cmds.append(("oidc-token", [shutil.which("oidc-token"), "bench"]))
        log(f"one-shot: {args.runs} runs each of {', '.join(n for n, _ in cmds)}")
        if shutil.which("hyperfine") and not args.no_hyperfine:
            oneshot, how = oneshot_hyperfine(cmds, args.runs, env, tmp)
        else:
            oneshot, how = oneshot_loop(cmds, args.runs, env)
        for name, r in oneshot.items():
            log(f"  {name:16} median {r['median_ms']:.3f} ms  p90 {r['p90_ms']:.3f} ms")
        # The credential helpers that programs run per request, beside `tokenctl token`, timed the same
        # way (Debian's hyperfine 1.15 cannot feed stdin): each reads its request from a file.
        helper_bin = tmp / "bin"
        helper_bin.mkdir()
        (helper_bin / "docker-credential-tokend").symlink_to(tokenctl_bin())
        (tmp / "config" / "tokend").mkdir(parents=True)
        (tmp / "config" / "tokend" / "docker-credentials").write_text("registry.example.com alice\n")
        (tmp / "helper-request").write_text("protocol=https\nhost=registry.example.com\n\n")
        helper_env = dict(env, TOKEND_SOCKET=str(sock), XDG_CONFIG_HOME=str(tmp / "config"))
        helper_cmds = [
            ("tokenctl token", [str(tokenctl_bin()), "token", "--socket", str(sock), "alice"]),
            ("tokenctl git-credential get", [str(tokenctl_bin()), "git-credential", "--socket", str(sock), "alice", "get"]),
            ("docker-credential-tokend get", [str(helper_bin / "docker-credential-tokend"), "get"]),
            ("tokenctl google-credential", [str(tokenctl_bin()), "google-credential", "--socket", str(sock), "alice"]),
            ("tokenctl kube-credential", [str(tokenctl_bin()), "kube-credential", "--socket", str(sock), "alice"]),
        ]
        # docker-credential-tokend reads the whole request as the registry: give it the host alone.
        (tmp / "docker-request").write_text("registry.example.com\n")
        helpers = {}
        for name, cmd in helper_cmds:
            stdin_file = tmp / ("docker-request" if name.startswith("docker") else "helper-request")
            helpers.update(oneshot_loop([(name, cmd)], args.runs, helper_env, stdin_file)[0])
        log("credential helpers (perf_counter_ns around subprocess.run, stdin from a file):")
        for name, r in helpers.items():
            log(f"  {name:28} median {r['median_ms']:.3f} ms  p90 {r['p90_ms']:.3f} ms  failed {r['failed_runs']}")
        if "oidc-token" in oneshot:
            ratio = oneshot["tokenctl token"]["median_ms"] / oneshot["oidc-token"]["median_ms"]
            oneshot_target = {"tokenctl_over_oidc_token_median": round(ratio, 3), "met": ratio <= 1.0}
        else:
            oneshot_target = {"tokenctl_over_oidc_token_median": None, "met": None}

        # ---- 2. connection per request
        (tmp / "request.json").write_text(MSG + "\n")
        (tmp / "oidc-request.json").write_text('{"request":"access_token","account":"bench"}\n')
        probe = subprocess.run([str(BIN / "loadgen"), "--socket", str(sock), "--connections", "1", "--requests", "1",
                                "--message-file", str(tmp / "request.json"), "--json", "--quiet"],
                               capture_output=True, text=True, timeout=30)
        reply_bytes = json.loads(probe.stdout)["reply_bytes"]
        floor_sock = tmp / "floor.sock"
        floor = procs.start([str(BIN / "echo_server"), "--quiet", "--mode", "epoll", "--reply-bytes", str(reply_bytes),
                             "--max-seconds", str(budget), str(floor_sock)], tmp / "floor.log")
        # SwiftNIO's floor, plain and reading the caller's identity as tokend does before a first call.
        nio_floors = {}
        if nio_floor_bin().exists():
            for key, extra in (("nio_floor", []), ("nio_floor_peer", ["--peer-credentials"])):
                nio_sock = tmp / f"{key}.sock"
                proc = procs.start([str(nio_floor_bin()), "--quiet", "--reply-bytes", str(reply_bytes), *extra,
                                    "--max-seconds", str(budget), str(nio_sock)], tmp / f"{key}.log")
                nio_floors[key] = (nio_sock, proc)
        else:
            log(f"no SwiftNIO floor at {nio_floor_bin()} (built with the Benchmarks package): its columns are left out")
        for _ in range(100):
            if floor_sock.exists() and all(sock.exists() for sock, _ in nio_floors.values()):
                break
            time.sleep(0.1)
        dur, cap, tmo = str(args.duration), str(args.max_requests), args.duration + 60
        rows = []
        for c in clients:
            row = {"clients": c}
            def point(message):  # loadgen's options for one point, asking `message`
                return ["--connections", str(c), "--requests", cap, "--duration", dur, "--max-seconds", dur,
                        "--warmup", "5", "--message-file", str(tmp / message), "--json", "--quiet",
                        "--connection-per-request"]
            common = point("request.json")
            row["tokend"] = run_point([str(BIN / "loadgen"), "--socket", str(sock), *common, "--expect-substring", at,
                                       "--label", f"tokend/c{c}"], env, td.pid, tmo)
            if oidc["available"]:
                # The cheapest way to drive oidc-agent: its plain-JSON IPC API (no key exchange,
                # no client library), by the same load generator as tokend and the floor.
                row["oidc_agent_plain"] = run_point(
                    [str(BIN / "loadgen"), "--socket", oidc["socket"], "--framing", "json", *point("oidc-request.json"),
                     "--expect-substring", '"access_token"', "--label", f"oidc-agent-plain/c{c}"], env, agent_pid, tmo)
            if oidc["available"] and "throughput_reason" not in oidc:
                row["oidc_agent"] = run_point([str(BIN / "oidc_loadgen"), "--account", "bench", "--clients", str(c),
                                               "--requests", cap, "--duration", dur, "--max-seconds", str(tmo - 20),
                                               "--warmup", "5", "--label", f"oidc-agent/c{c}"], env, agent_pid, tmo)
            row["floor"] = run_point([str(BIN / "loadgen"), "--socket", str(floor_sock), *common,
                                      "--label", f"floor/c{c}"], env, floor.pid, tmo)
            for key, (nio_sock, proc) in nio_floors.items():
                row[key] = run_point([str(BIN / "loadgen"), "--socket", str(nio_sock), *common,
                                      "--label", f"{key}/c{c}"], env, proc.pid, tmo)
            rows.append(row)
            log("  c=%-3d tokend %8.0f r/s  oidc-agent plain %8s r/s  oidc-agent %8s r/s  floor %8.0f r/s  SwiftNIO floor %8s r/s" % (
                c, row["tokend"]["requests_per_sec"],
                f"{row['oidc_agent_plain']['requests_per_sec']:.0f}" if "oidc_agent_plain" in row else "-",
                f"{row['oidc_agent']['requests_per_sec']:.0f}" if "oidc_agent" in row else "-",
                row["floor"]["requests_per_sec"],
                f"{row['nio_floor']['requests_per_sec']:.0f}" if "nio_floor" in row else "-"))
        posts_after = idp_token_posts(tmp / "idp")

        path = write_result("oneshot", {
            "settings": {"runs": args.runs, "duration_s": args.duration, "max_requests": args.max_requests,
                         "clients": clients, "oneshot_timer": how, "request": MSG, "tokend_reply_bytes": reply_bytes},
            "loadavg_start": loadavg_start,
            "tokend_bin": str(tokend_bin()), "tokenctl_bin": str(tokenctl_bin()),
            "nio_floor_bin": str(nio_floor_bin()) if nio_floors else None,
            "oidc_agent": oidc,
            "idp_token_posts_during_measurement": posts_after - posts_before,
            "oneshot": oneshot, "oneshot_target": oneshot_target,
            "oneshot_helpers": {"timer": "perf_counter_ns around subprocess.run, stdin from a file", "results": helpers},
            "connection_per_request": rows,
        })
        print(f"results: {path}")
        bad = any(r[k].get("exit", 0) != 0 for r in rows
                  for k in ("tokend", "oidc_agent_plain", "oidc_agent", "floor", "nio_floor", "nio_floor_peer") if k in r)
        return 3 if bad else 0
    finally:
        if oidc_dir.exists():
            subprocess.run([str(BENCH_DIR / "oidc-agent-setup.sh"), "stop", str(oidc_dir)], timeout=30)
        clean_up(procs, tmp, args.keep_tmp)


if __name__ == "__main__":
    sys.exit(main())
