package failover

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
)

// Kind classifies the outcome of one attempt to serve a request on a
// worker.
type Kind uint8

const (
	// OK is a reply the worker completed: any status the breaker does not
	// count as the worker's failure (2xx, 4xx other than 408 and 429).
	OK Kind = iota
	// Connect is a worker that could not be reached or dropped the
	// connection before any reply: connection refused or reset, host
	// unreachable, EOF before the status line. The worker is presumed dead
	// and is ejected at once (fast passive ejection).
	Connect
	// Timeout is a dial, TLS or response-header timeout (the worker did not
	// answer in time) while the client was still waiting.
	Timeout
	// Status is an error status before the first byte of the body: 408,
	// 429 and 5xx (see RetryableStatus and CountsAsFailure).
	Status
	// Cut is a reply that broke after its first byte reached the client: a
	// stream the worker stopped mid-generation.
	Cut
	// ClientGone is a request whose client went away (its context was
	// cancelled). It is not the worker's fault and never retried.
	ClientGone
	// Other is any other transport error.
	Other
	numKinds
)

var kindNames = [numKinds]string{"ok", "connect", "timeout", "status", "cut", "client_gone", "other"}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Outcome is what one attempt came to: its Kind, the worker's status when
// it answered, and whether any byte of the reply reached the client.
type Outcome struct {
	Kind Kind
	// Status is the worker's HTTP status (0 when it never answered).
	Status int
	// Started reports that the reply's first byte was sent to the client;
	// from then on the attempt can be migrated but not retried.
	Started bool
	// Sent reports that the worker sent any byte of its reply's body (a
	// token), whether or not it reached the client yet. A Timeout counts
	// against the worker only when Sent is false: a worker that sent
	// nothing is silent (wedged), one that streamed and then was slow is
	// not, and its timeout is recorded as neither failure nor success.
	Sent bool
	// Err is the transport error, if any.
	Err error
}

// Retryable reports whether the request may be sent again, to another
// worker, with nothing lost: the client has seen nothing yet, and the
// failure is a connect error, a timeout or a retryable status
// (RetryableStatus).
func (o Outcome) Retryable() bool {
	if o.Started {
		return false
	}
	switch o.Kind {
	case Connect, Timeout:
		return true
	case Status:
		return RetryableStatus(o.Status)
	}
	return false
}

// WorkerFailure reports whether the outcome counts against the worker's
// circuit breaker: connect errors, timeouts of a worker that sent nothing
// (Sent false), cut streams, and statuses CountsAsFailure names. A client that left and a 4xx reply say nothing
// against the worker.
func (o Outcome) WorkerFailure() bool {
	switch o.Kind {
	case Connect, Cut, Other:
		return true
	case Timeout:
		return !o.Sent
	case Status:
		return CountsAsFailure(o.Status)
	}
	return false
}

// silent reports a timeout of a worker that sent nothing.
func (o Outcome) silent() bool { return o.Kind == Timeout && !o.Sent }

// RetryableStatus reports whether a worker's status, seen before any byte
// was sent on, is worth retrying on another worker: 408, 429, 500, 502, 503
// and 504 (the SGLang gateway's list).
func RetryableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// CountsAsFailure reports whether a status counts against the worker's
// breaker: every 5xx. A 429 is a busy worker, not a broken one; other 4xx
// are the client's fault.
func CountsAsFailure(code int) bool { return code >= 500 && code <= 599 }

// Classify builds the Outcome of an attempt from the error of the upstream
// call (nil when it completed), the worker's status (0 when it never
// answered), whether the first byte reached the client, and the client's
// context. A cancelled client context wins over everything: the client
// left, whatever the transport then said.
func Classify(clientCtx context.Context, err error, status int, started bool) Outcome {
	o := Outcome{Status: status, Started: started, Err: err}
	switch {
	case clientCtx != nil && clientCtx.Err() != nil:
		o.Kind = ClientGone
	case err == nil && status != 0 && (RetryableStatus(status) || CountsAsFailure(status)) && !started:
		o.Kind = Status
	case err == nil:
		o.Kind = OK
	case started:
		o.Kind = Cut
	case isTimeout(err):
		o.Kind = Timeout
	case isConnect(err):
		o.Kind = Connect
	case status != 0 && (RetryableStatus(status) || CountsAsFailure(status)):
		o.Kind = Status
	default:
		o.Kind = Other
	}
	return o
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isConnect(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	var de *net.DNSError
	return errors.As(err, &de)
}
