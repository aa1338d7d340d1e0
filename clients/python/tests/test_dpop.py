"""Client.dpop_proof against the real tokend: DPoP proofs (RFC 9449) signed with the key tokend
made for a credential of the provider ``dpop`` at enrolment."""

from __future__ import annotations

import base64
import hashlib
import json
import time
import urllib.error
import urllib.request

import pytest
from helpers import DPOP_PROVIDER, PROVIDER, SilentServer, base64url_decode, decode_jwt

import tokend

URL = "https://api.example.com/v1/items"


def ath_of(access_token: str) -> str:
    """RFC 9449 §4.2: base64url(SHA-256(ASCII(token))), without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(access_token.encode("ascii")).digest()).decode().rstrip("=")


def test_dpop_proof_is_an_es256_jwt_for_the_request(client, user, dpop_enrolled):
    before = int(time.time())
    proof = client.dpop_proof(user, "POST", URL + "?page=2&q=secret#top")
    after = int(time.time())

    assert isinstance(proof, tokend.DPoPProof)
    assert proof.credentials.user_identifier == user
    assert proof.credentials.access_token == dpop_enrolled
    assert proof.credentials.token_type == "DPoP"
    header, claims, _, signature = decode_jwt(proof.proof)
    assert header["typ"] == "dpop+jwt"
    assert header["alg"] == "ES256"
    jwk = header["jwk"]
    assert jwk["kty"] == "EC" and jwk["crv"] == "P-256"
    assert jwk["x"] and jwk["y"] and "d" not in jwk  # the public key only
    assert len(signature) == 64  # r ‖ s (RFC 7518 §3.4)
    assert claims["htm"] == "POST"
    assert claims["htu"] == URL  # without query and fragment
    assert isinstance(claims["jti"], str) and len(claims["jti"]) >= 16
    assert before - 5 <= claims["iat"] <= after + 5
    assert claims["ath"] == ath_of(dpop_enrolled)
    assert "nonce" not in claims
    assert proof.headers == {"Authorization": "DPoP " + dpop_enrolled, "DPoP": proof.proof}
    # A new dict each time: changing one changes nothing.
    proof.headers["DPoP"] = "x"
    assert proof.headers["DPoP"] == proof.proof
    # Neither the token nor the proof shows in repr() or str(); the user does.
    for text in (repr(proof), str(proof)):
        assert dpop_enrolled not in text and proof.proof not in text
        assert proof.proof.split(".")[2] not in text
        assert user in text


def test_each_proof_is_new_and_signed_with_the_credentials_key(client, user, dpop_enrolled):
    first = client.dpop_proof(user, "GET", URL)
    second = client.dpop_proof(user, "GET", URL, min_valid=60)
    first_header, first_claims, _, _ = decode_jwt(first.proof)
    second_header, second_claims, _, _ = decode_jwt(second.proof)

    assert first.proof != second.proof
    assert first_claims["jti"] != second_claims["jti"]
    assert first_header["jwk"] == second_header["jwk"]  # the same key
    assert first_claims["ath"] == second_claims["ath"] == ath_of(dpop_enrolled)
    # Another credential has a key of its own.
    other = user + "-other"
    try:
        client.add_credential(other, DPOP_PROVIDER, dpop_enrolled + "-other", token_type="DPoP", expires_in=3600)
        other_header, other_claims, _, _ = decode_jwt(client.dpop_proof(other, "GET", URL).proof)
        assert other_header["jwk"] != first_header["jwk"]
        assert other_claims["ath"] == ath_of(dpop_enrolled + "-other")
    finally:
        client.remove_credential(other)


def test_dpop_proof_signature_verifies_with_its_jwk(client, user, dpop_enrolled):
    # cryptography is in the test venv (Tests/idp/requirements.txt), not a dependency of tokend.
    ec = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ec")
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    header, _, signing_input, signature = decode_jwt(client.dpop_proof(user, "DELETE", URL).proof)
    jwk = header["jwk"]
    key = ec.EllipticCurvePublicNumbers(
        int.from_bytes(base64url_decode(jwk["x"]), "big"), int.from_bytes(base64url_decode(jwk["y"]), "big"), ec.SECP256R1()
    ).public_key()
    der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
    key.verify(der, signing_input, ec.ECDSA(hashes.SHA256()))
    with pytest.raises(InvalidSignature):
        key.verify(der, signing_input + b"x", ec.ECDSA(hashes.SHA256()))


def test_nonce_is_carried_only_when_given_and_loopback_http_is_accepted(client, user, dpop_enrolled):
    _, claims, _, _ = decode_jwt(client.dpop_proof(user, "PUT", "http://127.0.0.1:8080/x?y=1", nonce="eyJ7S_zG.9-nonce").proof)
    assert claims["nonce"] == "eyJ7S_zG.9-nonce"
    assert claims["htm"] == "PUT" and claims["htu"] == "http://127.0.0.1:8080/x"
    _, claims, _, _ = decode_jwt(client.dpop_proof(user, "GET", "http://localhost/").proof)
    assert "nonce" not in claims and claims["htu"] == "http://localhost/"
    # An empty path is "/" (RFC 3986 normalisation, as servers compare htu).
    _, claims, _, _ = decode_jwt(client.dpop_proof(user, "GET", "https://api.example.com").proof)
    assert claims["htu"] == "https://api.example.com/"


def test_the_headers_go_on_a_urllib_request(client, user, dpop_enrolled, api):
    proof = client.dpop_proof(user, "GET", api.url)
    request = urllib.request.Request(api.url, headers=proof.headers, method="GET")
    # This resource server knows only bearer tokens: it refuses, after recording the request.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    refused.value.close()
    seen = api.seen[-1]["headers"]  # by lowercase name (urllib sends "Dpop")
    assert seen["authorization"] == "DPoP " + dpop_enrolled
    assert seen["dpop"] == proof.proof
    assert decode_jwt(seen["dpop"])[1]["htu"] == api.url


def test_dpop_proof_errors(client, user, dpop_enrolled, pool):
    # Tokens that are not DPoP-bound: a bearer credential of the IdP, and a bearer one of the
    # DPoP provider.
    bearer = user + "-bearer"
    unbound = user + "-unbound"
    try:
        client.add_token_response(bearer, PROVIDER, pool.take())
        client.add_credential(unbound, DPOP_PROVIDER, "bearer-of-dpop-" + dpop_enrolled, token_type="Bearer", expires_in=3600)
        for name in (bearer, unbound):
            with pytest.raises(tokend.InvalidCredential) as invalid:
                client.dpop_proof(name, "GET", URL)
            assert invalid.value.error_name == "io.tokend.TokenProvider.InvalidCredential"
            assert invalid.value.reason and "not DPoP-bound" in invalid.value.reason
            assert invalid.value.method == "io.tokend.TokenProvider.ProvideDPoPProof"
    finally:
        client.remove_credential(bearer)
        client.remove_credential(unbound)

    # What tokend refuses, by parameter.
    for arguments, parameter in (
        (("GET", "ftp://x"), "httpUri"),
        (("GET", "http://api.example.com/"), "httpUri"),  # cleartext to a host not the loopback
        (("GET", "/relative"), "httpUri"),
        (("G ET", URL), "httpMethod"),
    ):
        with pytest.raises(tokend.InvalidParameter) as caught:
            client.dpop_proof(user, *arguments)
        assert caught.value.error_name == "org.varlink.service.InvalidParameter"
        assert caught.value.parameter == parameter, arguments
        assert isinstance(caught.value, tokend.ProtocolError)
    with pytest.raises(tokend.InvalidParameter) as caught:
        client.dpop_proof(user, "GET", URL, nonce='with "quotes"')
    assert caught.value.error_name is not None and caught.value.parameter == "nonce"

    # min_valid goes to tokend, which cannot refresh a token without a refresh token, as for token().
    with pytest.raises(tokend.RefreshFailed) as too_short:
        client.dpop_proof(user, "GET", URL, min_valid=7200)
    assert too_short.value.user_identifier == user
    assert too_short.value.reason and "no refresh token" in too_short.value.reason
    assert too_short.value.method == "io.tokend.TokenProvider.ProvideDPoPProof"

    with pytest.raises(tokend.UnknownUser) as unknown:
        client.dpop_proof("py-nobody-has-this-user", "GET", URL)
    assert unknown.value.user_identifier == "py-nobody-has-this-user"
    assert unknown.value.method == "io.tokend.TokenProvider.ProvideDPoPProof"

    # Checked before anything is sent.
    with pytest.raises(tokend.InvalidParameter) as caught:
        client.dpop_proof("", "GET", URL)
    assert caught.value.error_name is None and caught.value.parameter == "userIdentifier"
    with pytest.raises(tokend.InvalidParameter) as caught:
        client.dpop_proof(user, "GET", None)  # type: ignore[arg-type]
    assert caught.value.error_name is None and caught.value.parameter == "httpUri"
    with pytest.raises(tokend.InvalidParameter) as caught:
        client.dpop_proof(user, "", URL)
    assert caught.value.error_name is None and caught.value.parameter == "httpMethod"
    with pytest.raises(ValueError):
        client.dpop_proof(user, "GET", URL, min_valid=-1)

    # Error replies leave the connection usable.
    assert client.dpop_proof(user, "GET", URL).credentials.access_token == dpop_enrolled


def test_a_reply_without_a_proof_is_a_protocol_error(tmp_path):
    credentials = {"userIdentifier": "alice", "accessToken": "tok-SECRET", "tokenType": "DPoP", "expiresAt": 2000000000}
    reply = json.dumps({"parameters": {"credentials": credentials}}).encode() + b"\0"
    server = SilentServer(str(tmp_path / "no-proof.sock"), reply=reply)
    try:
        with pytest.raises(tokend.ProtocolError) as caught:
            tokend.Client(server.path, timeout=2).dpop_proof("alice", "GET", URL, nonce="n")
        assert "no proof" in str(caught.value) and "tok-SECRET" not in str(caught.value)
        sent = json.loads(server.received.rstrip(b"\0"))
        assert sent == {
            "method": "io.tokend.TokenProvider.ProvideDPoPProof",
            "parameters": {"userIdentifier": "alice", "httpMethod": "GET", "httpUri": URL, "nonce": "n"},
        }
    finally:
        server.close()
