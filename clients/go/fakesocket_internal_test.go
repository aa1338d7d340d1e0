package tokend

import (
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// ServeUnixForTest listens on a Unix socket in a new directory under /tmp and runs handle on
// each connection, each in a goroutine of its own. The test's cleanup closes the listener and
// every connection, waits for the handlers and removes the directory. It returns the socket's
// path. (Exported so that the tests of package tokend_test can use it too; it is part of the
// test build only.)
func ServeUnixForTest(t *testing.T, prefix string, handle func(net.Conn)) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "fake.sock")
	listener, err := net.Listen("unix", path)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := listener.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				handle(nc)
			}()
		}
	}()
	t.Cleanup(func() {
		listener.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
		os.RemoveAll(dir)
	})
	return path
}
