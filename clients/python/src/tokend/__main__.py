"""A small command line: ``python -m tokend token USER`` prints a token of USER.

    python -m tokend [--socket PATH] [--timeout S] token USER [--min-valid S] [--header]
                     [--scope SCOPE] [--resource URI]   # a narrowed token
    python -m tokend [--socket PATH] status [USER]        # JSON, without tokens
    python -m tokend [--socket PATH] watch USER           # one line per new token: its expiry

Exit status: 0 on success, 2 for usage errors, 1 for any tokend error (its message on stderr).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import sys
from typing import Any

from ._client import Client
from ._errors import TokendError


def _json_default(value: Any) -> Any:
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    raise TypeError(type(value).__name__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tokend", description="Ask tokend for tokens.")
    parser.add_argument("--socket", help="tokend's socket (default: $TOKEND_SOCKET, else /run/tokend/io.tokend)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds a call may take (default 10)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    token = commands.add_parser("token", help="print an access token of USER")
    token.add_argument("user")
    token.add_argument("--min-valid", type=int, default=0, metavar="S", help="the token must stay valid S seconds")
    token.add_argument("--header", action="store_true", help="print 'Authorization: <type> <token>'")
    token.add_argument("--scope", help="a token narrowed to SCOPE (space-separated, a subset of the credential's)")
    token.add_argument("--resource", metavar="URI", help="a token narrowed to the API at URI (RFC 8707)")
    status = commands.add_parser("status", help="print the daemon's status as JSON (no tokens)")
    status.add_argument("user", nargs="?")
    watch = commands.add_parser("watch", help="print a line each time the token of USER changes")
    watch.add_argument("user")
    arguments = parser.parse_args(argv)

    try:
        client = Client(arguments.socket, timeout=arguments.timeout)
    except ValueError as error:
        parser.error(str(error))
    try:
        with client:
            if arguments.command == "token":
                credentials = client.token(
                    arguments.user, min_valid=arguments.min_valid, scope=arguments.scope, resource=arguments.resource
                )
                if arguments.header:
                    print("Authorization: " + credentials.authorization_header())
                else:
                    print(credentials.access_token)
            elif arguments.command == "status":
                print(json.dumps(dataclasses.asdict(client.status(arguments.user)), default=_json_default, indent=2))
            else:
                with client.watch(arguments.user) as updates:
                    for credentials in updates:
                        print("%s new token, expires at %s" % (credentials.user_identifier, credentials.expires_at.isoformat()), flush=True)
    except TokendError as error:
        print("tokend: %s" % error, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
