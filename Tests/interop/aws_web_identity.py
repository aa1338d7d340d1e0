#!/usr/bin/env python3
"""PyPI's boto3/botocore taking a web identity token file from a profile, against moto_server.

    aws_web_identity.py --profile NAME --endpoint URL

With AWS_CONFIG_FILE naming a config whose profile has role_arn and web_identity_token_file,
botocore reads the token file and calls STS AssumeRoleWithWebIdentity at the profile's
endpoint_url; the test then calls sts:GetCallerIdentity with the temporary credentials. Prints
`{"arn": ..., "sent": [FINGERPRINT, ...]}`: the caller's ARN and, from moto's recording API, the
first 16 hex digits of the SHA-256 of every WebIdentityToken sent so far (never the tokens), or
`{"error": MESSAGE}`.
"""
import argparse
import base64
import hashlib
import json
import sys
import urllib.parse
import urllib.request

import boto3
import botocore.exceptions


def sent_tokens(endpoint):
    with urllib.request.urlopen(endpoint + "/moto-api/recorder/download-recording", timeout=10) as response:
        lines = response.read().decode().splitlines()
    fingerprints = []
    for line in lines:
        entry = json.loads(line)
        body = entry.get("body") or ""
        if entry.get("body_encoded"):
            body = base64.b64decode(body).decode()
        form = urllib.parse.parse_qs(body)
        if form.get("Action") == ["AssumeRoleWithWebIdentity"]:
            token = form.get("WebIdentityToken", [""])[0]
            fingerprints.append(hashlib.sha256(token.encode()).hexdigest()[:16])
    return fingerprints


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", required=True)
    parser.add_argument("--endpoint", required=True)
    args = parser.parse_args()
    try:
        session = boto3.Session(profile_name=args.profile)
        identity = session.client("sts").get_caller_identity()
        print(json.dumps({"arn": identity["Arn"], "sent": sent_tokens(args.endpoint)}))
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, OSError) as error:
        # OSError: the token file is gone (tokend deletes it when the login ends).
        print(json.dumps({"error": str(error), "sent": sent_tokens(args.endpoint)}))


if __name__ == "__main__":
    sys.exit(main())
