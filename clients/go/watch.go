package tokend

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// Watcher follows the credentials of one user: Next returns the current credentials first,
// then once per new token. It holds its own connection until Close, the end of the Watch
// context, or the end of the stream.
//
//	w, err := client.Watch(ctx, "alice")
//	if err != nil { … }
//	defer w.Close()
//	for {
//		credentials, err := w.Next()
//		if err != nil { break } // *UnknownUserError (removed), *ReauthenticationRequiredError, ctx.Err(), …
//		use(credentials)
//	}
//
// There is no reconnection: when the daemon restarts, Next returns a *DaemonUnavailableError
// and the caller watches again.
type Watcher struct {
	user   string
	cn     *conn
	ended  endCause // why the Watch context ended, recorded when it does
	stop   func()
	method string

	mu       sync.Mutex
	pending  *Credentials // the first reply, read by Watch
	err      error        // the error that ended the stream
	closed   bool
	shutdown sync.Once
}

// Watch subscribes to user's credentials. It returns once the first reply has arrived
// (within the client's timeout and ctx), so an unknown user or a denial shows here. ctx
// bounds the whole subscription: when it ends, Next returns its error.
func (c *Client) Watch(ctx context.Context, user string) (*Watcher, error) {
	const method = interfaceName + ".Watch"
	if err := checkIdentifier(user, "userIdentifier", method); err != nil {
		return nil, err
	}
	parameters := map[string]any{"userIdentifier": user}
	message, err := json.Marshal(call{Method: method, Parameters: parameters, More: true})
	if err != nil {
		return nil, err
	}
	first, cancelFirst := context.WithTimeout(ctx, c.timeout)
	defer cancelFirst()
	cn, err := c.dial(first)
	if err != nil {
		return nil, err
	}
	// The connection's lifetime is ctx's; the first reply must also come within the timeout.
	w := &Watcher{user: user, cn: cn, method: method}
	w.stop = cn.guard(ctx, &w.ended)
	stopFirst, err := cn.send(first, message)
	if err != nil {
		refused := cn.refusal(first, err, method, parameters)
		w.Close()
		if refused != nil {
			return nil, refused
		}
		return nil, cn.ioError(first.Err(), err, method)
	}
	credentials, continues, err := w.receive(first.Err)
	stopFirst()
	if err != nil {
		w.Close()
		return nil, err
	}
	// From now on only ctx bounds the stream. The deadline is cleared before ctx is checked:
	// if ctx ends after the check, its guard moves the deadline into the past after this.
	_ = cn.nc.SetDeadline(time.Time{})
	if ctx.Err() != nil {
		w.Close()
		return nil, cn.ioError(ctx.Err(), ctx.Err(), method)
	}
	w.pending = credentials
	if !continues {
		w.finish(wrap(&ProtocolError{Method: method, Detail: "the stream ended without an error"}))
	}
	return w, nil
}

// Next returns the next credentials: the current ones on the first call, then each new token
// as tokend gets it. It blocks until then, the end of the Watch context, or Close. Once the
// stream has ended every call returns the same error: *UnknownUserError (the credential was
// removed), *ReauthenticationRequiredError, *DaemonUnavailableError (the connection was
// lost), the context's error, or ErrWatchClosed. Call Next from one goroutine at a time.
func (w *Watcher) Next() (*Credentials, error) {
	w.mu.Lock()
	if w.pending != nil {
		credentials := w.pending
		w.pending = nil
		w.mu.Unlock()
		return credentials, nil
	}
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return nil, err
	}
	w.mu.Unlock()
	credentials, continues, err := w.receive(w.ended.err)
	if err != nil {
		w.finish(err)
		return nil, w.errOrClosed()
	}
	if !continues {
		w.finish(wrap(&ProtocolError{Method: w.method, Detail: "the stream ended without an error"}))
	}
	return credentials, nil
}

// ErrWatchClosed is returned by Next after Close.
var ErrWatchClosed = errors.New("tokend: the watch was closed")

// Close ends the subscription and closes its connection. It may be called from any goroutine,
// also while Next waits (Next then returns ErrWatchClosed).
func (w *Watcher) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	if w.err == nil {
		w.err = ErrWatchClosed
	}
	w.pending = nil
	w.mu.Unlock()
	w.release()
	return nil
}

// release closes the connection and stops its context guard, once.
func (w *Watcher) release() {
	w.shutdown.Do(func() {
		w.cn.close()
		w.stop()
	})
}

func (w *Watcher) errOrClosed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// finish ends the stream with err (unless it has ended already) and releases the connection.
// Credentials still pending are returned by Next first.
func (w *Watcher) finish(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.release()
}

// receive reads one reply of the stream; ctxErr says why a failed read failed.
func (w *Watcher) receive(ctxErr func() error) (*Credentials, bool, error) {
	raw, err := w.cn.read()
	if err != nil {
		w.mu.Lock()
		closed := w.closed
		w.mu.Unlock()
		if closed {
			return nil, false, ErrWatchClosed
		}
		return nil, false, w.cn.ioError(ctxErr(), err, w.method)
	}
	r, err := decodeReply(raw, w.method)
	if err != nil {
		return nil, false, err
	}
	if err := r.errorOf(w.method, map[string]any{"userIdentifier": w.user}); err != nil {
		return nil, false, err
	}
	credentials, err := credentialsOf(r, w.method, w.user)
	if err != nil {
		return nil, false, err
	}
	return credentials, r.Continues, nil
}
