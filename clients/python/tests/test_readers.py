"""The reader grammar against Tests/Fixtures/reader-grammar.json, the table the daemon's (Swift)
and the Go client's tests read too: a case on which the languages disagree fails here or there."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from helpers import PROVIDER

import tokend

FIXTURE = Path(__file__).resolve().parents[3] / "Tests" / "Fixtures" / "reader-grammar.json"
CASES = json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]


PROBLEMS = {"no-kind", "unknown-kind", "invalid-id", "invalid-name", "invalid-unit", "invalid-path", "invalid-combination"}


def test_the_fixture_has_every_kind_and_every_problem():
    assert len(CASES) >= 100
    readers = [case["reader"] for case in CASES if "reader" in case]
    assert {reader.partition(":")[0] for reader in readers} == {"uid", "gid", "user", "group", "unit", "exe"}
    joined = {(left.partition(":")[0], right.partition(":")[0]) for left, plus, right in (r.partition("+") for r in readers) if plus}
    assert {("uid", "unit"), ("uid", "exe"), ("user", "unit"), ("user", "exe")} <= joined
    assert {case["error"] for case in CASES if "error" in case} == PROBLEMS
    assert all(("reader" in case) != ("error" in case) for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=[repr(case["text"])[:40] for case in CASES])
def test_parse_reader_agrees_with_the_fixture(case):
    if "reader" in case:
        assert tokend.parse_reader(case["text"]) == case["reader"]
        assert tokend.parse_reader(case["reader"]) == case["reader"]
    else:
        with pytest.raises(tokend.ReaderError) as raised:
            tokend.parse_reader(case["text"])
        assert raised.value.problem == case["error"]
        assert isinstance(raised.value, ValueError)
        assert "\n" not in str(raised.value) and str(raised.value).startswith("reader '")
        assert len(str(raised.value)) < 400


def test_a_sha256_is_sent_in_lower_case_and_a_malformed_one_is_part_of_the_path():
    digest = "0123456789abcdef" * 4
    assert tokend.parse_reader("uid:1+exe:/usr/bin/a@sha256:" + digest.upper()) == "uid:1+exe:/usr/bin/a@sha256:" + digest
    # 63 digits: no sha256, the whole text is the path, kept as given.
    assert tokend.parse_reader("exe:/usr/bin/a@sha256:" + digest[:63].upper()) == "exe:/usr/bin/a@sha256:" + digest[:63].upper()


def test_add_credential_refuses_a_bad_reader_before_sending():
    client = tokend.Client("/nonexistent/tokend.socket")  # never connected: the refusal is local
    with pytest.raises(tokend.InvalidParameterError) as raised:
        client.add_credential("alice", "idp", access_token="x", readers=["uid:1000", "gid:-1"])
    assert raised.value.parameter == "readers"
    assert "gid:-1" in str(raised.value)


def test_the_daemon_stores_the_canonical_readers(client, user, pool):
    """gid: readers go through (tokenctl once refused them); uid:0042 is sent and stored as uid:42."""
    gid = os.getgid()
    client.add_token_response(user, PROVIDER, pool.take(), readers=["gid:%d" % gid, "uid:0042"])
    assert client.status(user).credentials[0].readers == ("gid:%d" % gid, "uid:42")
    assert client.token(user).access_token  # this process holds the group


def test_a_program_reader_admits_this_interpreter_and_no_other_program(client, user, pool, daemon):
    """The daemon matches an exe: reader against the caller's /proc/PID/exe: this interpreter, named
    with its uid and its sha256 (sent in upper case, stored in lower case), reads; a credential for
    another program is refused."""
    exe = os.readlink("/proc/self/exe")
    digest = hashlib.sha256(Path(exe).read_bytes()).hexdigest()
    mine = "uid:%d+exe:%s@sha256:%s" % (os.getuid(), exe, digest)
    response = pool.take()
    client.add_token_response(user, PROVIDER, response, readers=[mine[:-64] + digest.upper()])
    assert client.status(user).credentials[0].readers == (mine,)
    # A connection accepted while no credential had a program reader carries no writer's stamps,
    # and program readers refuse its calls: the program connects again.
    with tokend.Client(daemon.socket_path, timeout=10) as again:
        assert again.token(user).access_token == response["access_token"]

        other = "uid:%d+exe:/usr/bin/false" % os.getuid()
        client.add_token_response(user, PROVIDER, pool.take(), readers=[other], replace=True)
        with pytest.raises(tokend.PermissionDeniedError):
            again.token(user)
