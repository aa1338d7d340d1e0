#define _GNU_SOURCE
#include <sys/random.h>
#include <errno.h>
#include "CTokendShims.h"
#include <limits.h>
#include <time.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

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

int tokend_random_bytes(void *buffer, unsigned long length) {
    unsigned char *p = buffer;
    while (length > 0) {
        ssize_t got = getrandom(p, length, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += got;
        length -= (unsigned long)got;
    }
    return 0;
}

// Declared by the Swift runtime (libswift_Concurrency) as a function pointer with the Swift
// calling convention; only its address is used here. Weak: a runtime without it links too.
extern void *swift_task_enqueueGlobal_hook __attribute__((weak));

int tokend_install_swift_enqueue_global_hook(const void *hook) {
    if (&swift_task_enqueueGlobal_hook == NULL) return -1;
    void *expected = NULL;
    // Compare-and-swap, as NIO does: another piece of code that installed a hook keeps it.
    int installed = __atomic_compare_exchange_n(&swift_task_enqueueGlobal_hook, &expected, (void *)hook, 0,
                                                __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return installed ? 0 : -1;
}

const void *tokend_swift_enqueue_global_hook_address(void) { return &swift_task_enqueueGlobal_hook; }

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

int tokend_spawn_session(int *pid, const char *path, char *const argv[], char *const envp[], int stdin_fd, int stdout_fd) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int result = posix_spawn_file_actions_init(&actions);
    if (result != 0) return result;
    result = posix_spawnattr_init(&attributes);
    if (result != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return result;
    }
    sigset_t none, every;
    sigemptyset(&none);
    sigfillset(&every);
    if ((result = posix_spawn_file_actions_adddup2(&actions, stdin_fd, 0)) == 0 &&
        (result = posix_spawn_file_actions_adddup2(&actions, stdout_fd, 1)) == 0 &&
        (result = posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)) == 0 &&
        (result = posix_spawn_file_actions_addclosefrom_np(&actions, 3)) == 0 &&
        (result = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)) == 0 &&
        (result = posix_spawnattr_setsigmask(&attributes, &none)) == 0 &&
        (result = posix_spawnattr_setsigdefault(&attributes, &every)) == 0) {
        pid_t child = 0;
        result = posix_spawn(&child, path, &actions, &attributes, argv, envp);
        if (result == 0) *pid = child;
    }
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return result;
}

int tokend_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

int tokend_child_has_ended(int pid) {
    siginfo_t info = {0};
    if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return -1;
    return info.si_pid == pid ? 1 : 0;
}

int tokend_malloc_trim(void) {
#if defined(__GLIBC__)
    return malloc_trim(0);
#else
    return 0;
#endif
}
