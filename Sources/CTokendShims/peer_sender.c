#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include "CTokendShims.h"

int tokend_peek_sender(int fd, int *pid) {
    char byte;
    union {
        struct cmsghdr align;
        char buffer[CMSG_SPACE(sizeof(struct ucred))];
    } control;
    struct iovec vector = {.iov_base = &byte, .iov_len = 1};
    struct msghdr message = {0};
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    message.msg_control = control.buffer;
    message.msg_controllen = sizeof control.buffer;
    ssize_t count;
    do {
        count = recvmsg(fd, &message, MSG_PEEK | MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    } while (count < 0 && errno == EINTR);
    if (count < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    if (count == 0) return 0;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header != NULL; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_CREDENTIALS &&
            header->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
            struct ucred credentials;
            memcpy(&credentials, CMSG_DATA(header), sizeof credentials);
            *pid = credentials.pid;
            return 1;
        }
    }
    errno = ENODATA;
    return -1;
}
