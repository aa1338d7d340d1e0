#!/usr/bin/env python3
"""PyPI's google-auth loading an external-account credential configuration and refreshing it.

    google_external_account.py CONFIG [--refreshes N]

Loads CONFIG (type external_account, credential_source.executable) as google-auth's pluggable
credentials and refreshes the
credentials N times (default 1); each refresh runs the configured executable and exchanges its
subject token at the configured token_url. Prints one JSON object: `{"refreshed": N, "class": ...}`,
or `{"error": MESSAGE}` when google-auth refused or failed. The STS tokens are never printed.
"""
import argparse
import json
import sys

import google.auth
import google.auth.exceptions
import google.auth.pluggable
import google.auth.transport.requests


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("--refreshes", type=int, default=1)
    args = parser.parse_args()
    try:
        # The pluggable (executable-sourced) class that google.auth.default() would choose for this
        # configuration, built directly: default() also looks up the project at
        # cloudresourcemanager.googleapis.com, which a test on 127.0.0.1 cannot reach.
        with open(args.config) as source:
            info = json.load(source)
        credentials = google.auth.pluggable.Credentials.from_info(
            info, scopes=["https://www.googleapis.com/auth/cloud-platform"])
        request = google.auth.transport.requests.Request()
        for _ in range(args.refreshes):
            credentials.refresh(request)
        print(json.dumps({"refreshed": args.refreshes, "class": type(credentials).__module__,
                          "valid": credentials.valid}))
    except (google.auth.exceptions.GoogleAuthError, ValueError) as error:
        print(json.dumps({"error": str(error)}))


if __name__ == "__main__":
    sys.exit(main())
