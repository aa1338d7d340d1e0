package tokend_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"tokend.io/tokend"
)

// TestAFullAcceptQueueDelaysACallInsteadOfFailingIt: a Unix socket whose accept queue is full
// refuses a connect at once (EAGAIN); the client tries again until its deadline, so a burst of
// other clients delays a call rather than failing it.
func TestAFullAcceptQueueDelaysACallInsteadOfFailingIt(t *testing.T) {
	directory, err := os.MkdirTemp("/tmp", "tokend-go-full-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(directory)
	path := filepath.Join(directory, "s.sock")
	listener, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(listener)
	address := &syscall.SockaddrUnix{Name: path}
	if err := syscall.Bind(listener, address); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(listener, 0); err != nil {
		t.Fatal(err)
	}
	var fillers []int
	defer func() {
		for _, filler := range fillers {
			syscall.Close(filler)
		}
	}()
	for full := false; !full; {
		if len(fillers) == 64 {
			t.Fatal("the accept queue never filled")
		}
		filler, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		switch err := syscall.Connect(filler, address); {
		case err == nil:
			fillers = append(fillers, filler)
		case errors.Is(err, syscall.EAGAIN):
			syscall.Close(filler)
			full = true
		default:
			t.Fatal(err)
		}
	}

	result := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := tokend.NewClient(tokend.WithSocket(path)).Token(ctx, "alice", 0, "")
		result <- err
	}()
	// A client that does not try again has failed by now (its first connect is refused at once).
	select {
	case err := <-result:
		t.Fatalf("the call ended while the queue was full: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	for _, filler := range fillers {
		syscall.Close(filler)
	}
	fillers = nil
	// The fillers' connections come first (closed, nothing to read), then the client's call.
	for answered := false; !answered; {
		peer, _, err := syscall.Accept(listener)
		if err != nil {
			t.Fatal(err)
		}
		received := make([]byte, 0, 4096)
		buffer := make([]byte, 4096)
		for len(received) == 0 || received[len(received)-1] != 0 {
			n, err := syscall.Read(peer, buffer)
			if err != nil || n <= 0 {
				break
			}
			received = append(received, buffer[:n]...)
		}
		if len(received) > 0 && received[len(received)-1] == 0 {
			syscall.Write(peer, []byte("this is not json\x00"))
			answered = true
		}
		syscall.Close(peer)
	}
	select {
	case err := <-result:
		// It reached the server and read its answer, which is not Varlink.
		if !errors.Is(err, tokend.ErrProtocol) {
			t.Fatalf("Token: %v; want the protocol error of the server's answer", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the call did not end")
	}
}
