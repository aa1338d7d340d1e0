package tokend

// QuotaExceeded without the daemon: a Unix socket server in the test refuses every connection
// as tokend does for a per-uid connection limit (its error as the only message, then the end of
// the connection). The client must return that error, not report a lost connection, whether
// the refusal closed the connection before the call was written (EPIPE) or after (ECONNRESET).

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const quotaRefusal = `{"error":"io.tokend.TokenProvider.QuotaExceeded","parameters":{"quota":"connections_per_uid","limit":128}}` + "\x00"

// refusingServer writes quotaRefusal on each connection it accepts and closes it. With
// waitForCall it does so only once the client's call is there, left unread (so the close
// resets the connection).
type refusingServer struct {
	path    string
	mu      sync.Mutex
	refused int
}

func startRefusingServer(t *testing.T, waitForCall bool) *refusingServer {
	t.Helper()
	s := &refusingServer{}
	s.path = ServeUnixForTest(t, "tokend-go-quota-", func(nc net.Conn) {
		defer nc.Close()
		if waitForCall {
			waitReadable(nc)
		}
		_, _ = nc.Write([]byte(quotaRefusal))
		nc.Close()
		s.mu.Lock()
		s.refused++
		s.mu.Unlock()
	})
	return s
}

func (s *refusingServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// waitRefused waits until count connections were refused and closed.
func (s *refusingServer) waitRefused(count int) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		refused := s.refused
		s.mu.Unlock()
		if refused >= count {
			return true
		}
	}
	return false
}

// waitReadable waits (5 s at most) until nc has something to read, without reading it.
func waitReadable(nc net.Conn) {
	raw, err := nc.(*net.UnixConn).SyscallConn()
	if err != nil {
		return
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	peek := make([]byte, 1)
	_ = raw.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), peek, syscall.MSG_PEEK)
		return err != syscall.EAGAIN
	})
}

func checkQuotaExceeded(t *testing.T, what string, err error) {
	t.Helper()
	var quota *QuotaExceededError
	if !errors.Is(err, ErrQuotaExceeded) || !errors.As(err, &quota) || errors.Is(err, ErrDaemonUnavailable) {
		t.Fatalf("%s: %v (%T), want *QuotaExceededError", what, err, err)
	}
	if quota.Quota != "connections_per_uid" || quota.Limit != 128 || quota.UserIdentifier != "" {
		t.Errorf("%s: %#v", what, quota)
	}
	if !strings.Contains(err.Error(), "the quota connections_per_uid (128) is reached") {
		t.Errorf("%s: message %q", what, err)
	}
}

func TestQuotaExceededOnARefusedConnection(t *testing.T) {
	for _, waitForCall := range []bool{false, true} {
		server := startRefusingServer(t, waitForCall)
		c := NewClient(WithSocket(server.path), WithTimeout(5*time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		// Closed at once, the connection may end before or after the call is written.
		for i := 0; i < 3; i++ {
			_, err := c.Token(ctx, "alice", 0, "")
			checkQuotaExceeded(t, "Token", err)
		}
		_, err := c.Watch(ctx, "alice")
		checkQuotaExceeded(t, "Watch", err)
		_, err = c.TokenSource("alice").Token()
		checkQuotaExceeded(t, "TokenSource", err)
		cancel()
		c.Close()
	}
}

// The write fails for sure: the refusal is complete (the connection closed) before the call
// is written, on an idle connection and on a fresh one.
func TestQuotaExceededWhenTheWriteFailsAfterTheRefusal(t *testing.T) {
	server := startRefusingServer(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()

	cn, err := dial(ctx, server.path, deadline, DefaultMaxMessageBytes)
	if err != nil {
		t.Fatal(err)
	}
	if !server.waitRefused(1) {
		t.Fatal("the server did not refuse the connection")
	}
	c := NewClient(WithSocket(server.path), WithTimeout(5*time.Second))
	defer c.Close()
	c.idle = append(c.idle, cn)
	_, err = c.Token(ctx, "alice", 0, "")
	checkQuotaExceeded(t, "Token on a refused idle connection", err)
	if refused := server.count(); refused != 1 {
		t.Errorf("the call was sent again on a fresh connection (%d refused)", refused)
	}

	cn, err = dial(ctx, server.path, deadline, DefaultMaxMessageBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.close()
	if !server.waitRefused(2) {
		t.Fatal("the server did not refuse the connection")
	}
	stop, err := cn.send(ctx, []byte(`{"method":"io.tokend.TokenProvider.Status"}`))
	if err == nil {
		stop()
		t.Fatal("the write to a closed connection succeeded")
	}
	checkQuotaExceeded(t, "refusal after "+err.Error(), cn.refusal(ctx, err, interfaceName+".Status", nil))
}
