"""`python -m tokend` against the real tokend."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys

from helpers import cli


def test_cli_prints_the_token(daemon, user, enrolled):
    result = cli("token", user, socket=daemon.socket_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == enrolled["access_token"] + "\n"
    header = cli("token", user, "--header", "--min-valid", "60", socket=daemon.socket_path)
    assert header.stdout == "Authorization: Bearer %s\n" % enrolled["access_token"]


def test_cli_reports_errors_on_stderr(daemon, tmp_path):
    unknown = cli("token", "py-nobody-cli", socket=daemon.socket_path)
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert "py-nobody-cli" in unknown.stderr
    missing = str(tmp_path / "none.sock")
    unavailable = cli("token", "alice", socket=missing)
    assert unavailable.returncode == 1 and missing in unavailable.stderr


def test_cli_status_is_json_without_tokens(daemon, user, enrolled):
    result = cli("status", user, socket=daemon.socket_path)
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert [c["user_identifier"] for c in status["credentials"]] == [user]
    assert enrolled["access_token"] not in result.stdout


def test_cli_watch_prints_a_line_per_token_and_ends_on_removal(daemon, client, user, enrolled):
    environment = dict(os.environ, TOKEND_SOCKET=daemon.socket_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "tokend", "watch", user],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment, stdin=subprocess.DEVNULL,
    )
    try:
        ready, _, _ = select.select([process.stdout], [], [], 15)
        assert ready, "no output from python -m tokend watch"
        line = process.stdout.readline()
        assert line.startswith(user + " new token, expires at ")
        assert enrolled["access_token"] not in line
        client.remove_credential(user)
        _stdout, stderr = process.communicate(timeout=15)
        assert process.returncode == 1
        assert user in stderr and "no credential" in stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
