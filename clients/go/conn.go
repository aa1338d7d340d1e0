package tokend

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// call is one Varlink call on the wire.
type call struct {
	Method     string         `json:"method"`
	Parameters map[string]any `json:"parameters,omitempty"`
	More       bool           `json:"more,omitempty"`
}

// reply is one Varlink reply.
type reply struct {
	Parameters json.RawMessage `json:"parameters"`
	Continues  bool            `json:"continues"`
	Error      string          `json:"error"`
}

// conn is one connection to the daemon; it carries one call at a time.
type conn struct {
	nc         *net.UnixConn
	r          *bufio.Reader
	maxMessage int
	path       string
}

// dial connects to path before deadline (and before ctx ends). A Unix socket whose accept
// queue is full (a burst of clients, or another user's flood) refuses a connect at once with
// EAGAIN instead of waiting as TCP does: dial tries again, backing off from 1 ms to 50 ms, until
// the deadline.
func dial(ctx context.Context, path string, deadline time.Time, maxMessage int) (*conn, error) {
	dialer := net.Dialer{Deadline: deadline}
	backoff := time.Millisecond
	for {
		nc, err := dialer.DialContext(ctx, "unix", path)
		if err == nil {
			return &conn{nc: nc.(*net.UnixConn), r: bufio.NewReaderSize(nc, 4096), maxMessage: maxMessage, path: path}, nil
		}
		if !errors.Is(err, syscall.EAGAIN) || (!deadline.IsZero() && time.Until(deadline) <= backoff) {
			return nil, connectError(ctx, err, path)
		}
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, connectError(ctx, ctx.Err(), path)
		case <-timer.C:
		}
		if backoff *= 2; backoff > 50*time.Millisecond {
			backoff = 50 * time.Millisecond
		}
	}
}

// connectError describes a failed connect; it names the socket path.
func connectError(ctx context.Context, err error, path string) error {
	if ctx.Err() == context.Canceled {
		return wrap(&canceledError{method: "connect", cause: ctx.Err()})
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENOENT:
			return wrap(&DaemonUnavailableError{SocketPath: path, Err: err,
				reason: fmt.Sprintf("tokend is not running: there is no socket at %s", path)})
		case syscall.ECONNREFUSED:
			return wrap(&DaemonUnavailableError{SocketPath: path, Err: err,
				reason: fmt.Sprintf("tokend is not running: nothing listens on %s", path)})
		case syscall.EACCES, syscall.EPERM:
			return &PermissionDeniedError{SocketPath: path}
		case syscall.ENOTDIR:
			return wrap(&DaemonUnavailableError{SocketPath: path, Err: err,
				reason: fmt.Sprintf("tokend is not running: there is no socket at %s (a path component is not a directory)", path)})
		}
	}
	if isTimeout(err) || ctx.Err() == context.DeadlineExceeded {
		return wrap(&TimeoutError{Method: "connect", SocketPath: path, Connecting: true})
	}
	if len(path) > 107 {
		return wrap(&DaemonUnavailableError{SocketPath: path, Err: err,
			reason: fmt.Sprintf("the socket path %s is too long for a Unix socket", path)})
	}
	return wrap(&DaemonUnavailableError{SocketPath: path, Err: err})
}

func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

func (c *conn) close() { _ = c.nc.Close() }

// write sends one message.
func (c *conn) write(message []byte) error {
	_, err := c.nc.Write(append(message, 0))
	return err
}

// send writes one message under ctx: the connection's deadline becomes ctx's, and a guard
// (see guard) ends the write, and the reads after it, when ctx ends. It returns the guard's
// stop; when the write fails the guard is already stopped and the error is the write's.
func (c *conn) send(ctx context.Context, message []byte) (stop func(), err error) {
	stop = c.guard(ctx, nil)
	deadline, _ := ctx.Deadline()
	_ = c.nc.SetDeadline(deadline)
	if err = c.write(message); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// waitingReplyTime bounds the read of a reply already sent on a connection whose write failed
// (the peer is gone: its data and the end of the stream are there at once).
const waitingReplyTime = time.Second

// refusal returns the error reply the daemon had already sent when writing a call to it
// failed with writeErr, or nil. A daemon that refuses a connection (QuotaExceeded for a per-uid
// connection limit) writes that error as the connection's only message and closes it, maybe
// before the call arrived: that error is the answer, not the broken connection. The connection
// is not used for anything else afterwards.
func (c *conn) refusal(ctx context.Context, writeErr error, method string, callParameters map[string]any) error {
	if ctx.Err() != nil || isTimeout(writeErr) {
		return nil
	}
	deadline := time.Now().Add(waitingReplyTime)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if c.nc.SetReadDeadline(deadline) != nil {
		return nil
	}
	raw, err := c.read()
	if err != nil {
		return nil
	}
	r, err := decodeReply(raw, method)
	if err != nil {
		return nil
	}
	return r.errorOf(method, callParameters)
}

// read returns the next message, without its NUL terminator.
func (c *conn) read() ([]byte, error) {
	var message []byte
	for {
		chunk, err := c.r.ReadSlice(0)
		if len(message)+len(chunk) > c.maxMessage+1 {
			return nil, errMessageTooLarge
		}
		message = append(message, chunk...)
		switch {
		case err == nil:
			return message[:len(message)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(message) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

var errMessageTooLarge = errors.New("reply too large")

// guard makes blocking I/O on c return as soon as ctx ends: it moves the connection's
// deadline into the past, after recording ctx's error in ended (when not nil). The returned
// stop must be called before c is used again; it waits until the guard can no longer touch the
// connection.
func (c *conn) guard(ctx context.Context, ended *endCause) (stop func()) {
	if ctx.Done() == nil {
		return func() {}
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-ctx.Done():
			if ended != nil {
				ended.record(ctx.Err())
			}
			_ = c.nc.SetDeadline(time.Unix(1, 0))
		case <-done:
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// endCause is why the context of a stream ended (its error), recorded by the stream's guard:
// the stream outlives the call that opened it, and keeps this instead of the context.
type endCause struct{ value atomic.Value }

type causeBox struct{ err error }

func (e *endCause) record(err error) { e.value.Store(causeBox{err}) }

// err is the recorded error, nil while the context has not ended.
func (e *endCause) err() error {
	box, _ := e.value.Load().(causeBox)
	return box.err
}

// ioError turns a failed read or write of a call into the caller's error; ctxErr is the error
// of the call's context (nil while it has not ended).
func (c *conn) ioError(ctxErr error, err error, method string) error {
	if ctxErr != nil {
		if ctxErr == context.DeadlineExceeded {
			return wrap(&TimeoutError{Method: method, SocketPath: c.path})
		}
		return wrap(&canceledError{method: method, cause: ctxErr})
	}
	switch {
	case isTimeout(err):
		return wrap(&TimeoutError{Method: method, SocketPath: c.path})
	case errors.Is(err, errMessageTooLarge):
		return wrap(&ProtocolError{Method: method, Detail: fmt.Sprintf("it is larger than %d bytes", c.maxMessage)})
	}
	return wrap(&DaemonUnavailableError{SocketPath: c.path, Method: method, Err: err,
		reason: fmt.Sprintf("the connection to tokend at %s was lost during %s", c.path, shortMethod(method))})
}

// decodeReply parses one message.
func decodeReply(message []byte, method string) (*reply, error) {
	var r reply
	decoder := json.NewDecoder(bytes.NewReader(message))
	if err := decoder.Decode(&r); err != nil {
		return nil, wrap(&ProtocolError{Method: method, Detail: "it is not a JSON object"})
	}
	return &r, nil
}

// errorOf returns the typed error of an error reply, nil for a successful one.
func (r *reply) errorOf(method string, callParameters map[string]any) error {
	if r.Error == "" {
		return nil
	}
	var parameters map[string]any
	if len(r.Parameters) > 0 && !bytes.Equal(r.Parameters, []byte("null")) {
		decoder := json.NewDecoder(bytes.NewReader(r.Parameters))
		decoder.UseNumber()
		if err := decoder.Decode(&parameters); err != nil {
			parameters = nil
		}
	}
	return remoteError(r.Error, parameters, method, callParameters)
}

// decodeParameters unmarshals a successful reply's parameters into out.
func (r *reply) decodeParameters(out any, method string) error {
	if len(r.Parameters) == 0 {
		return wrap(&ProtocolError{Method: method, Detail: "it has no parameters"})
	}
	if err := json.Unmarshal(r.Parameters, out); err != nil {
		detail := "it is malformed"
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			detail = fmt.Sprintf("field %q is mistyped", typeErr.Field)
		}
		return wrap(&ProtocolError{Method: method, Detail: detail})
	}
	return nil
}
