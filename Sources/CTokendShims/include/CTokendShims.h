#ifndef CTOKEND_SHIMS_H
#define CTOKEND_SHIMS_H

// Linux APIs that Swift's Glibc module does not import.
#include <sys/timerfd.h>

/// timerfd_create(CLOCK_REALTIME, TFD_CLOEXEC) armed to fail reads with ECANCELED whenever
/// CLOCK_REALTIME is set (TFD_TIMER_CANCEL_ON_SET). Returns the descriptor or -1.
int tokend_clock_step_timerfd(void);

/// Re-arms a descriptor from tokend_clock_step_timerfd after it reported a step. 0 or -1.
int tokend_clock_step_rearm(int fd);

/// prctl(PR_SET_DUMPABLE, 0): no core dumps, /proc/self owned by root, no ptrace by the same
/// uid. 0 or -1 (errno set).
int tokend_set_not_dumpable(void);

/// prctl(PR_GET_DUMPABLE): 0, 1 or 2, or -1.
int tokend_get_dumpable(void);

/// malloc_trim(0) where the C library has it (glibc): returns free heap pages to the system.
/// 1 if memory was released, else 0.
int tokend_malloc_trim(void);

/// getrandom(buf, length, 0), retried on EINTR and short reads: fills `buffer` from the
/// kernel's CSPRNG in (usually) one system call. 0, or -1 (errno set) if the kernel lacks it.
int tokend_random_bytes(void *buffer, unsigned long length);

/// Installs `hook` as the Swift runtime's global-enqueue hook (`swift_task_enqueueGlobal_hook`,
/// where Swift concurrency sends every task it would put on its own thread pool), if no hook is
/// installed yet. The variable is found by the linker, so this works with the Swift runtime
/// linked statically, where `dlsym` (which sees only dynamic symbols) cannot find it.
/// 0 when installed; -1 when another hook is already there or the runtime has no such hook.
int tokend_install_swift_enqueue_global_hook(const void *hook);

/// The address of that hook variable as the linker resolved it (NULL without one).
const void *tokend_swift_enqueue_global_hook_address(void);

/// Starts `path` with `argv` and `envp` in a session of its own (setsid: its pid is its process
/// group), with no signal blocked and every signal at its default action, `stdin_fd` as its
/// stdin, `stdout_fd` as its stdout, /dev/null as its stderr and no other descriptor.
/// 0 with `*pid` set, or an errno value.
int tokend_spawn_session(int *pid, const char *path, char *const argv[], char *const envp[], int stdin_fd, int stdout_fd);

/// pipe2(fds, O_CLOEXEC). 0 or -1 (errno set).
int tokend_pipe_cloexec(int fds[2]);

/// Whether `pid`, a child of this process, has ended, without reaping it (waitid with WNOWAIT):
/// 1 ended, 0 running, -1 error (errno set).
int tokend_child_has_ended(int pid);

/// recvmsg(fd, one byte, MSG_PEEK | MSG_DONTWAIT) on a Unix stream socket with SO_PASSCRED: the
/// pid the kernel stamped on the bytes at the head of its queue (that of the process that wrote
/// them, in the caller's pid namespace; 0 where not visible). 1 with *pid set; 0 when nothing is
/// queued (or the peer closed); -1 when the bytes carry no credentials or the call failed (errno).
int tokend_peek_sender(int fd, int *pid);

#endif
