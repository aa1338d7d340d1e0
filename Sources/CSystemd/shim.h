// libsystemd's readiness/socket-activation and journal APIs, for the TokendSystemd module.
// The variadic functions (sd_notifyf, sd_journal_send, sd_journal_print) cannot be called from
// Swift; TokendSystemd uses sd_notify and sd_journal_sendv. Location fields are added by
// TokendSystemd itself, so the header's location-adding macros are suppressed.
#ifndef TOKEND_CSYSTEMD_SHIM_H
#define TOKEND_CSYSTEMD_SHIM_H
#define SD_JOURNAL_SUPPRESS_LOCATION 1
#include <sys/uio.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>
#endif
