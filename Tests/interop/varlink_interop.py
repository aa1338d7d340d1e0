#!/usr/bin/env python3
"""Drives tokend with the PyPI `varlink` package — a client nobody on this project wrote.

    varlink_interop.py SOCKET USER

Prints one JSON object with what each call returned, for the Swift test to check:
GetInfo, GetInterfaceDescription (parsed by the package: the interface must be valid Varlink
IDL), ProvideTokenReplacement, an error reply, and the first two replies of Watch (the second
one produced by the caller replacing the credential through AddCredential).
"""
import json
import sys
import threading
import time

import varlink


def main():
    socket_path, user = sys.argv[1], sys.argv[2]
    address = "unix:" + socket_path
    result = {}
    client = varlink.Client(address=address)

    with client.open("org.varlink.service") as service:
        info = service.GetInfo()
        result["info"] = {"product": info["product"], "interfaces": info["interfaces"]}
        description = service.GetInterfaceDescription("io.tokend.TokenProvider")["description"]
        # The package parses the IDL; a syntax error raises here.
        interface = varlink.Interface(description)
        result["interface"] = {"name": interface.name, "methods": sorted(k for k, v in interface.members.items() if isinstance(v, varlink.scanner._Method))}

    # Uses the interface description the service serves to build the proxy.
    with client.open("io.tokend.TokenProvider") as tokend:
        reply = tokend.ProvideTokenReplacement(user, 60, None)
        result["token"] = reply["credentials"]["accessToken"]
        result["expiresAt"] = reply["credentials"]["expiresAt"]
        try:
            tokend.ProvideTokenReplacement("no-such-user-" + user, None, None)
            result["error"] = None
        except varlink.VarlinkError as error:
            result["error"] = {"name": error.error(), "parameters": error.parameters()}

    # Watch on its own connection: the first reply at once, the next after a change.
    watched = []

    def watch():
        with client.open("io.tokend.TokenProvider") as watcher:
            for reply in watcher.Watch(user, _more=True):
                watched.append(reply["credentials"]["accessToken"])
                if len(watched) == 2:
                    return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    deadline = time.time() + 10
    while not watched and time.time() < deadline:
        time.sleep(0.05)
    with client.open("io.tokend.TokenProvider") as tokend:
        new_token = "python-replaced-" + str(int(time.time() * 1000))
        tokend.AddCredential(user, "example", new_token, None, "Bearer", 3600, None, None, True)
    thread.join(timeout=10)
    result["watch"] = watched
    result["replacedWith"] = new_token
    print(json.dumps(result))


if __name__ == "__main__":
    main()
