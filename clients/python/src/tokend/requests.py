"""Authentication for the ``requests`` library with tokens from tokend.

    import requests
    from tokend.requests import TokendAuth

    session = requests.Session()
    session.auth = TokendAuth("alice")
    session.get("https://api.example.com/me")

    session.auth = TokendAuth("alice", scope="read")     # a narrowed token (see Client.token)

Each request gets ``Authorization: Bearer <token>`` from tokend (valid for at least
``min_valid`` seconds), or a token narrowed to ``scope`` and/or ``resource`` when given (see
``Client.token``). When the server answers **401**, the auth asks tokend again, naming the
token the server refused (``rejected=``), so tokend refreshes it; the request is then sent
**once** more, as a copy with the new header. A second 401 is returned as it is: there is never a
third attempt. The first 401 is in ``response.history``.

A request is only repeated when its body can be sent again: no body, ``bytes``/``str``/form
data, or a file object that can ``seek()`` back (it is rewound). A body that is a generator or
another one-shot stream is not retried: the 401 is returned. So is a 401 from another origin a
redirect led to (``requests`` drops the ``Authorization`` header there): no token goes to it.
When tokend has no new token (it answers with the token that was refused), the 401 is returned
too. Errors from tokend (``UnknownUserError``, ``RefreshFailedError``, ``ReauthenticationRequiredError``,
``DaemonUnavailableError``…) are raised from the ``requests`` call.

This module imports ``requests``; ``import tokend`` alone does not.
"""

from __future__ import annotations

from typing import Any

import requests
from requests.auth import AuthBase
from requests.cookies import extract_cookies_to_jar

from ._client import Client
from ._common import Seconds, narrowing_parameters, narrowing_repr, whole_seconds
from ._types import Credentials

__all__ = ["TokendAuth"]


class TokendAuth(AuthBase):
    """``requests`` authentication: a token of ``user`` from tokend, refreshed once on a 401.

    Args:
        user: the user identifier of the credential in tokend.
        client: the ``tokend.Client`` to ask (default: a new one on ``$TOKEND_SOCKET`` or the
            default socket). One client, and so one connection, serves all requests.
        min_valid: the token must stay valid this many seconds (default 30).
        scope, resource: ask for a token narrowed to this scope (a subset of the credential's)
            and/or for this API (an absolute URI), as ``Client.token`` does (default: the
            credential's own token).
    """

    def __init__(
        self,
        user: str,
        client: Client | None = None,
        min_valid: Seconds = 30,
        *,
        scope: str | None = None,
        resource: str | None = None,
    ) -> None:
        narrowing_parameters(scope, resource)  # refused now rather than at the first request
        self.user = user
        self.client = client if client is not None else Client()
        self.min_valid = whole_seconds(min_valid, "min_valid")
        self.scope = scope
        self.resource = resource

    def __repr__(self) -> str:
        return "TokendAuth(user=%r, client=%r%s)" % (self.user, self.client, narrowing_repr(self.scope, self.resource))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TokendAuth)
            and other.user == self.user
            and other.client is self.client
            and other.min_valid == self.min_valid
            and other.scope == self.scope
            and other.resource == self.resource
        )

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        credentials = self.client.token(self.user, min_valid=self.min_valid, scope=self.scope, resource=self.resource)
        request.headers["Authorization"] = credentials.authorization_header()
        request.register_hook("response", _RetryOnUnauthorized(self, credentials, _body_position(request.body)))
        return request


_ONE_SHOT = object()


def _body_position(body: Any) -> Any:
    """Where a file body starts (to rewind it for the retry); None when the body can be resent as
    it is; ``_ONE_SHOT`` when it cannot be sent again."""
    if body is None or isinstance(body, (bytes, str, bytearray)):
        return None
    tell = getattr(body, "tell", None)
    if callable(tell) and callable(getattr(body, "seek", None)):
        try:
            return tell()
        except (OSError, ValueError):
            return _ONE_SHOT
    return _ONE_SHOT


class _RetryOnUnauthorized:
    """The response hook of one request: on its first 401, one retry with a fresh token."""

    def __init__(self, auth: TokendAuth, sent: Credentials, body_position: Any) -> None:
        self.auth = auth
        self.sent_token = sent.access_token
        self.sent_header = sent.authorization_header()
        self.body_position = body_position
        self.used = False

    def __call__(self, response: requests.Response, **kwargs: Any) -> requests.Response:
        if response.status_code != 401 or self.used:
            return response
        self.used = True
        if self.body_position is _ONE_SHOT:
            return response
        request = response.request
        if request.headers.get("Authorization") != self.sent_header:
            # Not the request this auth signed: a redirect to another origin, where requests
            # dropped the header. A new token must not go there.
            return response
        try:
            auth = self.auth
            credentials = auth.client.token(
                auth.user, min_valid=auth.min_valid, rejected=self.sent_token, scope=auth.scope, resource=auth.resource
            )
        except BaseException:
            response.close()
            raise
        if credentials.access_token == self.sent_token:
            return response  # tokend has nothing newer: sending the same token again is pointless
        if self.body_position is not None:
            body: Any = request.body  # a file body: _body_position found its seek and tell
            body.seek(self.body_position)
        # Read and release the 401 so that its connection can carry the retry.
        response.content  # noqa: B018
        response.close()
        retry = request.copy()
        # The retry is a new request: it must not come back through this hook.
        retry.hooks = {"response": [hook for hook in request.hooks.get("response", []) if hook is not self]}
        cookies = getattr(retry, "_cookies", None)
        if cookies is not None:
            extract_cookies_to_jar(cookies, request, response.raw)
            retry.prepare_cookies(cookies)
        retry.headers["Authorization"] = credentials.authorization_header()
        retried = response.connection.send(retry, **kwargs)
        retried.history.append(response)
        retried.request = retry
        return retried
