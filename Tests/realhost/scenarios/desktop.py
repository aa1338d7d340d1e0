"""The desktop companion as a real user service: scenario g of the real-host layer."""

from __future__ import annotations

from harness import scenario

USERS = {"alice": 1000, "bob": 1001}


@scenario("g-notify-user-service", "tokend-notify.service of a lingering user shows the warning to that user only",
          flavour="desktop")
def notify_user_service(host, checks):
    m = host.machine
    host.ensure_running()
    for user, uid in USERS.items():
        m.run(["loginctl", "enable-linger", user])
        m.wait_for(f"{user}'s user manager", lambda uid=uid: m.run(
            ["systemctl", "is-active", f"user@{uid}.service"], check=False).out.strip() == "active", timeout=60)

    def notified(user: str) -> list[str]:
        log = m.run(["cat", f"/home/{user}/notifications.log"], check=False).out
        return [line for line in log.splitlines() if "Notify" in line]

    try:
        with host.restoring_config():
            for user in USERS:
                # A notification server on the user's session bus that records every Notify call.
                m.run(["systemd-run", "--user", f"--machine={user}@", "--quiet", "--unit=notification-server",
                       "/usr/bin/python3", "-m", "dbusmock", "--template", "notification_daemon",
                       "-l", f"/home/{user}/notifications.log"])
                m.wait_for(f"{user}'s notification server on the session bus", lambda user=user: m.run(
                    ["busctl", "--user", f"--machine={user}@", "status", "org.freedesktop.Notifications"],
                    check=False).status == 0, timeout=60)
                result = m.run(["systemctl", "--user", f"--machine={user}@", "enable", "--now", "tokend-notify.service"],
                               check=False)
                checks.expect(result.status == 0, f"{user}: systemctl --user enable --now tokend-notify.service", result)
            for user in USERS:
                state = m.show("tokend-notify.service", "ActiveState", user=user)["ActiveState"]
                checks.expect(state == "active", f"{user}'s tokend-notify.service runs", state)

            # alice reads a credential whose login ends an hour after it began (max_session_age),
            # with a warning 59m55s ahead: 5 s after she is enrolled. (A lead that had already
            # passed when the date became known is skipped.)
            host.add_config('\n[providers.shortlogin]\nkind = "oauth2"\ntoken_endpoint = "http://127.0.0.1:9/token"\n'
                            'client_id = "shortlogin"\nclient_auth = "none"\nmax_session_age = "1h"\n'
                            'relogin_warning = ["59m55s"]\n')
            reload = host.systemctl("reload", "tokend.service", check=False)
            checks.require(reload.status == 0, "a provider whose logins last an hour, warned 59m55s ahead", reload)
            host.add_credential("rh-g", ["user:alice"], provider="shortlogin")

            lines = m.wait_for("alice's notification", lambda: [line for line in notified("alice") if "rh-g" in line],
                               timeout=60)
            checks.expect(lines, "the warning reached alice's session bus as a notification", lines)
            status = host.tokenctl("status", "--json", user="bob", check=False)
            checks.expect("rh-g" not in status.out, "bob does not see the credential", status)
            # Both companions followed their streams before the warning was said. A probe sent to
            # bob's server now lands after anything his companion got with alice's warning; then
            # his log must hold the probe and nothing else.
            m.run(["busctl", "--user", "--machine=bob@", "--", "call", "org.freedesktop.Notifications",
                   "/org/freedesktop/Notifications", "org.freedesktop.Notifications", "Notify", "susssasa{sv}i",
                   "realhost", "0", "", "probe", "", "0", "0", "-1"])
            bob = m.wait_for("bob's server to record the probe", lambda: notified("bob"), timeout=30)
            checks.expect(len(bob) == 1 and "probe" in bob[0], "nothing but the probe reached bob's session bus", bob)
            journal = m.run(["journalctl", "_SYSTEMD_USER_UNIT=tokend-notify.service", "_UID=1000", "--no-pager", "-o", "cat"],
                            check=False).out
            checks.note(f"alice's tokend-notify.service said: {journal.strip().splitlines()[-3:]}")
    finally:
        for user in USERS:
            m.run(["systemctl", "--user", f"--machine={user}@", "disable", "--now", "tokend-notify.service"], check=False)
            m.run(["systemctl", "--user", f"--machine={user}@", "stop", "notification-server"], check=False)
            m.run(["loginctl", "disable-linger", user], check=False)
        host.tokenctl("remove", "rh-g", check=False)
