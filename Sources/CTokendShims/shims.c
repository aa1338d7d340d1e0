#include "CTokendShims.h"
#include <limits.h>
#include <time.h>
#include <unistd.h>

int tokend_clock_step_rearm(int fd) {
    struct itimerspec spec = {0};
    // A point the timer never reaches: only clock changes wake the reader.
    spec.it_value.tv_sec = INT_MAX;
    return timerfd_settime(fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &spec, NULL);
}

int tokend_clock_step_timerfd(void) {
    int fd = timerfd_create(CLOCK_REALTIME, TFD_CLOEXEC);
    if (fd < 0) return -1;
    if (tokend_clock_step_rearm(fd) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

#include <sys/prctl.h>

int tokend_set_not_dumpable(void) { return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }

int tokend_get_dumpable(void) { return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0); }
