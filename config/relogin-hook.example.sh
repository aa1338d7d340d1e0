#!/bin/sh
# An example relogin_command for tokend, installed as
# /usr/share/doc/tokend/examples/relogin-hook.sh. Copy it (e.g. to /usr/local/lib/tokend/), make
# it executable and name it in a provider's relogin_command. tokend runs it as its own user, with
# no arguments, for each re-login warning; what it knows is in its environment:
#
#   TOKEND_CREDENTIAL      the credential's name, CHOSEN BY WHOEVER ENROLLED IT (see below)
#   TOKEND_PROVIDER        the provider's name from tokend.toml
#   TOKEND_OWNER_UID       the uid the credential is for (digits)
#   TOKEND_RELOGIN_BY      when the credential stops working, in seconds since the epoch (digits)
#   TOKEND_RELOGIN_REASON  why: max_token_age, session_end, refresh_token_expiry or token_expiry
#   TOKEND_THRESHOLD       the relogin_warning lead that passed, e.g. 7d
#
# TOKEND_CREDENTIAL is data, never code: any local user may enrol a credential for themself and
# name it. It is 1 to 255 printable ASCII characters without spaces or '/', so it may hold $, `,
# ;, |, &, <, >, quotes, *, ?, [, \ and begin with '-'. So: always "$TOKEND_CREDENTIAL" in double
# quotes, after -- where a command takes options, never in eval, sh -c, a here-document that is
# run, a command line built as a string, or a sed or awk program; quote it for whatever reads it
# next (as below for a shell command shown to a person).
#
# This one writes a line to the journal (logger) and, where a mail command is installed, mails
# the owner. It finishes within relogin_command_timeout or tokend kills it with what it started.
set -eu

credential=$TOKEND_CREDENTIAL

# The credential's name quoted for a POSIX shell, so that the command shown below runs as shown:
# single quotes around it, and each ' inside as '\''.
quoted=$(printf '%s' "$credential" | sed "s/'/'\\\\''/g")
quoted="'$quoted'"
case $credential in
-*) command="tokenctl login -- $quoted" ;;
*) command="tokenctl login $quoted" ;;
esac

when=$(date -u -d "@$TOKEND_RELOGIN_BY" '+%Y-%m-%d %H:%M UTC' 2>/dev/null || printf '%s' "$TOKEND_RELOGIN_BY")
message=$(printf 'The tokend credential %s (provider %s) needs a new login by %s (%s).\nRun: %s' \
    "$quoted" "$TOKEND_PROVIDER" "$when" "$TOKEND_RELOGIN_REASON" "$command")

logger -t tokend-relogin -- "$message"

owner=$(getent passwd "$TOKEND_OWNER_UID" | cut -d: -f1) || owner=
if [ -n "$owner" ] && command -v mail >/dev/null 2>&1; then
    printf '%s\n' "$message" | mail -s "tokend: a credential needs a new login by $when" -- "$owner"
fi
