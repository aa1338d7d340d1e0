"""Authentication for ``httpx`` (sync and async) with tokens from tokend.

    import httpx
    from tokend.httpx import TokendAuth

    auth = TokendAuth("alice")
    httpx.get("https://api.example.com/me", auth=auth)
    httpx.get("https://api.example.com/me", auth=TokendAuth("alice", scope="read"))   # a narrowed token
    async with httpx.AsyncClient(auth=auth) as http:
        await http.get("https://api.example.com/me")

Each request gets ``Authorization: Bearer <token>`` from tokend, or a token narrowed to
``scope`` and/or ``resource`` when given (see ``Client.token``). On a **401** the auth asks
tokend again with the refused token (``rejected=``), so tokend refreshes it, and sends the
request **once** more, as a copy with the new header; a second 401 is returned as it is. The
first 401 is in ``response.history``. The async flow asks tokend through ``tokend.AsyncClient``
and never blocks the event loop.

Only requests whose body is in memory (no body, ``content=bytes``, ``data=``, ``json=``) are
repeated; a streamed body (a generator, an async iterator, a file upload) cannot be sent twice,
so its 401 is returned. So is a 401 from another origin a redirect led to (httpx drops the
header there): no token goes to it. When tokend answers with the token that was refused, the
401 is returned too. Errors from tokend are raised from the ``httpx`` call.

This module imports ``httpx``; ``import tokend`` alone does not.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator

import httpx

from ._aio import AsyncClient
from ._client import Client
from ._common import Seconds, narrowing_parameters, narrowing_repr, whole_seconds
from ._types import Credentials

__all__ = ["TokendAuth"]


class TokendAuth(httpx.Auth):
    """``httpx`` authentication: a token of ``user`` from tokend, refreshed once on a 401.

    Args:
        user: the user identifier of the credential in tokend.
        client: the ``tokend.Client`` for ``httpx.Client`` requests (default: a new one on
            ``$TOKEND_SOCKET`` or the default socket, made on first use).
        async_client: the ``tokend.AsyncClient`` for ``httpx.AsyncClient`` requests (default:
            a new one on the same socket as ``client``, made on first use).
        min_valid: the token must stay valid this many seconds (default 30).
        scope, resource: ask for a token narrowed to this scope (a subset of the credential's)
            and/or for this API (an absolute URI), as ``Client.token`` does (default: the
            credential's own token).
    """

    requires_request_body = False
    requires_response_body = False

    def __init__(
        self,
        user: str,
        client: Client | None = None,
        async_client: AsyncClient | None = None,
        min_valid: Seconds = 30,
        *,
        scope: str | None = None,
        resource: str | None = None,
    ) -> None:
        narrowing_parameters(scope, resource)  # refused now rather than at the first request
        self.user = user
        self.min_valid = whole_seconds(min_valid, "min_valid")
        self.scope = scope
        self.resource = resource
        self._client = client
        self._async_client = async_client

    def __repr__(self) -> str:
        return "TokendAuth(user=%r%s)" % (self.user, narrowing_repr(self.scope, self.resource))

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client()
        return self._client

    @property
    def async_client(self) -> AsyncClient:
        if self._async_client is None:
            if self._client is not None:
                self._async_client = AsyncClient(self._client.socket_path, self._client.timeout)
            else:
                self._async_client = AsyncClient()
        return self._async_client

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        sent = self.client.token(self.user, min_valid=self.min_valid, scope=self.scope, resource=self.resource)
        request.headers["Authorization"] = sent.authorization_header()
        response = yield request
        if not _should_retry(request, response, sent):
            return
        fresh = self.client.token(
            self.user, min_valid=self.min_valid, rejected=sent.access_token, scope=self.scope, resource=self.resource
        )
        if fresh.access_token == sent.access_token:
            return
        yield _copy_with_token(request, fresh)

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        sent = await self.async_client.token(self.user, min_valid=self.min_valid, scope=self.scope, resource=self.resource)
        request.headers["Authorization"] = sent.authorization_header()
        response = yield request
        if not _should_retry(request, response, sent):
            return
        fresh = await self.async_client.token(
            self.user, min_valid=self.min_valid, rejected=sent.access_token, scope=self.scope, resource=self.resource
        )
        if fresh.access_token == sent.access_token:
            return
        yield _copy_with_token(request, fresh)


def _should_retry(request: httpx.Request, response: httpx.Response, sent: Credentials) -> bool:
    """A 401 to the request this auth signed (not to one on another origin that a redirect led
    to, where httpx drops the header), whose body can be sent again."""
    if response.status_code != 401:
        return False
    if response.request.headers.get("Authorization") != sent.authorization_header():
        return False
    return _replayable(request)


def _replayable(request: httpx.Request) -> bool:
    """Whether the body is in memory (httpx reads ``bytes``, ``data=`` and ``json=`` bodies at
    once; streams stay unread), so that it can be sent again."""
    try:
        _ = request.content
    except httpx.RequestNotRead:
        return False
    return True


def _copy_with_token(request: httpx.Request, credentials: Credentials) -> httpx.Request:
    headers = request.headers.copy()
    headers["Authorization"] = credentials.authorization_header()
    return httpx.Request(
        request.method,
        request.url,
        headers=headers,
        content=request.content,
        extensions=dict(request.extensions),
    )
