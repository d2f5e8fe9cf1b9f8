package leasehold

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// Sentinel errors, for errors.Is.
var (
	// ErrNotAcquired: the lock was not obtained. The broker refused the
	// Acquire or Campaign with ABORTED: the lock is held, in its
	// lock-delay, or other callers are in line ahead, and the wait (if any)
	// ran out. The *Error it comes in says which (Reason) and who holds
	// the lock (Metadata).
	ErrNotAcquired = errors.New("leasehold: lock not acquired")
	// ErrLost: the lease is gone without its holder's consent (it expired,
	// was revoked, the store lost it, or no renewal was confirmed before
	// its local deadline). Lease.Err and Lease.Release return a *LostError
	// that matches it.
	ErrLost = errors.New("leasehold: lease lost")
	// ErrReleased: Lease.Err after Lease.Release (a release is not a loss).
	ErrReleased = errors.New("leasehold: lease released")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("leasehold: client closed")
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo the broker puts in
// the details of every error status.
const ErrorDomain = "leasehold.v1"

// Error is a call the broker (or the transport to it) failed: the gRPC
// status code, and the broker's structured refusal when it sent one (its
// google.rpc.ErrorInfo: Reason and Metadata; its google.rpc.RetryInfo:
// RetryDelay). Get it with errors.As. An ABORTED Error matches
// ErrNotAcquired.
//
// Reasons, as the broker sends them: LOCK_HELD, LOCK_DELAY and LINE_AHEAD
// (ABORTED); LEASE_NOT_HELD and LEASE_REVOKED (NOT_FOUND); NOT_OWNER
// (FAILED_PRECONDITION); BAD_ARGUMENT (INVALID_ARGUMENT, Metadata
// "argument" naming the field); LIMIT_REACHED (RESOURCE_EXHAUSTED,
// Metadata "limit" naming the broker's flag); UNAVAILABLE;
// REQUEST_TIMEOUT (DEADLINE_EXCEEDED); otherwise the code's name.
// Metadata values are strings; durations are milliseconds ("remaining_ms").
// A broker from before structured refusals sends none: Reason is then
// empty, and Code alone tells.
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Reason is the ErrorInfo reason ("LOCK_HELD"), or "" when the status
	// carried none.
	Reason string
	// Metadata is the ErrorInfo metadata (nil when none).
	Metadata map[string]string
	// RetryDelay is the RetryInfo delay: how long to wait before trying
	// again (0 when the status carried none).
	RetryDelay time.Duration
	// Message is the broker's own message (for logs); Error() says the
	// same in this package's words.
	Message string

	op    string // "acquire \"jobs/nightly\"", for Error()
	place string // a kept place in line: a secret, never shown
	st    *status.Status
}

// Error says what failed, in this package's words (an option's name where
// the broker names a request field).
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("leasehold: ")
	if e.op != "" {
		b.WriteString(e.op)
		b.WriteString(": ")
	}
	b.WriteString(e.describe())
	return b.String()
}

// Is makes an ABORTED Error match ErrNotAcquired.
func (e *Error) Is(target error) bool {
	return target == ErrNotAcquired && e.Code == codes.Aborted
}

// GRPCStatus is the status the call failed with, so that status.Code and
// status.FromError work on an *Error.
func (e *Error) GRPCStatus() *status.Status {
	if e.st != nil {
		return e.st
	}
	return status.New(e.Code, e.Message)
}

func (e *Error) ms(key string) (time.Duration, bool) {
	v, ok := e.Metadata[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 63)
	if err != nil {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

func (e *Error) ms0(key string) time.Duration {
	d, _ := e.ms(key)
	return d
}

// option names the AcquireOptions (or other Go names) where the broker
// names a request field.
var option = map[string]string{
	"name":        "the lock name",
	"ttl":         "WithTTL",
	"wait":        "WithWait",
	"lock_delay":  "WithLockDelay",
	"limit":       "WithLimit",
	"holder":      "WithHolder",
	"owner_token": "the owner token",
	"place":       "the place kept in line",
	"value":       "the campaign's value",
	"election":    "the election name",
	"tenant":      "Tenant",
	"prefix":      "ListOptions.Prefix",
	"page_size":   "ListOptions.PageSize",
	"page_token":  "ListOptions.PageToken",
}

func (e *Error) describe() string {
	m := e.Metadata
	switch e.Reason {
	case "LOCK_HELD":
		return fmt.Sprintf("lock %q is held by %q (fence %s) for another %v; waited %v",
			m["name"], m["holder"], m["fence"], e.ms0("remaining_ms"), e.ms0("waited_ms"))
	case "LOCK_DELAY":
		return fmt.Sprintf("lock %q is in its lock-delay for another %v (its lease with fence %s ended without a release); waited %v",
			m["name"], e.ms0("remaining_ms"), m["fence"], e.ms0("waited_ms"))
	case "LINE_AHEAD":
		return fmt.Sprintf("lock %q has %s callers in line ahead; waited %v", m["name"], m["queued"], e.ms0("waited_ms"))
	case "LEASE_NOT_HELD":
		return fmt.Sprintf("no lease on %q: it expired, was released, or the store lost it", m["name"])
	case "LEASE_REVOKED":
		return fmt.Sprintf("the lease on %q (fence %s) was revoked by an operator", m["name"], m["fence"])
	case "NOT_OWNER":
		return fmt.Sprintf("the lease on %q belongs to another owner now (fence %s)", m["name"], m["fence"])
	case "BAD_ARGUMENT":
		arg := m["argument"]
		what := option[arg]
		if what == "" {
			what = arg
		}
		switch {
		case arg == "wait" && m["max_wait_ms"] != "":
			return fmt.Sprintf("WithWait(%v) is above the broker's longest wait, %v (its --max-wait)", e.ms0("wait_ms"), e.ms0("max_wait_ms"))
		case arg == "ttl" && m["min_ttl_ms"] != "":
			return fmt.Sprintf("WithTTL(%v) is outside the broker's bounds, %v to %v (its --ttl-min and --ttl-max)",
				e.ms0("ttl_ms"), e.ms0("min_ttl_ms"), e.ms0("max_ttl_ms"))
		case arg == "lock_delay" && m["max_lock_delay_ms"] != "":
			return fmt.Sprintf("WithLockDelay(%v) is above the broker's longest lock-delay, %v (its --max-lock-delay)", e.ms0("lock_delay_ms"), e.ms0("max_lock_delay_ms"))
		case arg == "limit" && m["max_limit"] != "":
			return fmt.Sprintf("WithLimit(%s) is above the broker's largest semaphore limit, %s (its --max-semaphore-limit)", m["limit"], m["max_limit"])
		case strings.HasPrefix(what, "With"), strings.HasPrefix(what, "ListOptions."):
			// The option the caller wrote, then the broker's words.
			return fmt.Sprintf("%s: %s", what, e.Message)
		}
		// A name, a token: the broker's message names it in neutral words.
		return e.Message
	case "LIMIT_REACHED":
		if e.Message != "" {
			return e.Message
		}
		return fmt.Sprintf("the broker's --%s cap is reached", m["limit"])
	}
	if e.Message == "" {
		return codeName(e.Code)
	}
	if e.Code == codes.Aborted || e.Reason != "" {
		return e.Message
	}
	return codeName(e.Code) + ": " + e.Message
}

// codeName is the code's name as the gRPC specification spells it
// (ABORTED), the way the broker's reasons and other clients name it.
func codeName(c codes.Code) string {
	s := c.String()
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// placeMetadata is the trailing metadata of an Acquire or Campaign that
// kept its place in line.
const placeMetadata = "leasehold-place"

// fromBroker says whether the broker itself sent the status (it carries
// the broker's ErrorInfo, or a place it kept): not the transport failing
// to reach it.
func (e *Error) fromBroker() bool {
	return e.Reason != "" || e.place != ""
}

// toError is the *Error of a failed call (nil for nil); trailer is the
// call's trailing metadata, if known. An error that is no gRPC status (a
// context's) is returned as it is.
func toError(err error, op string, trailer metadata.MD) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e = &Error{Code: st.Code(), Message: st.Message(), op: op, st: st}
	for _, d := range st.Proto().GetDetails() {
		switch d.GetTypeUrl() {
		case "type.googleapis.com/google.rpc.ErrorInfo":
			reason, domain, md := errorInfo(d.GetValue())
			if domain == ErrorDomain || domain == "" {
				e.Reason, e.Metadata = reason, md
			}
		case "type.googleapis.com/google.rpc.RetryInfo":
			e.RetryDelay = retryInfo(d.GetValue())
		}
	}
	if v := trailer.Get(placeMetadata); len(v) > 0 {
		e.place = v[0]
	}
	return e
}

// errorInfo decodes a google.rpc.ErrorInfo (reason = 1, domain = 2,
// metadata = 3: map<string, string>). Decoded here rather than with
// genproto's errdetails, so that this module needs no version of genproto
// of its own (its googleapis/rpc packages moved to a module of their own in
// 2023, and two versions of one package in a build fail it).
func errorInfo(b []byte) (reason, domain string, md map[string]string) {
	fields(b, func(num protowire.Number, v []byte) {
		switch num {
		case 1:
			reason = string(v)
		case 2:
			domain = string(v)
		case 3:
			var k, val string
			fields(v, func(n protowire.Number, x []byte) {
				switch n {
				case 1:
					k = string(x)
				case 2:
					val = string(x)
				}
			})
			if md == nil {
				md = map[string]string{}
			}
			md[k] = val
		}
	})
	return reason, domain, md
}

// retryInfo decodes a google.rpc.RetryInfo's retry_delay (1: a
// google.protobuf.Duration of seconds = 1, nanos = 2).
func retryInfo(b []byte) time.Duration {
	var d time.Duration
	fields(b, func(num protowire.Number, v []byte) {
		if num != 1 {
			return
		}
		for len(v) > 0 {
			n, typ, l := protowire.ConsumeTag(v)
			if l < 0 || typ != protowire.VarintType {
				return
			}
			v = v[l:]
			x, l := protowire.ConsumeVarint(v)
			if l < 0 {
				return
			}
			v = v[l:]
			switch n {
			case 1:
				d += time.Duration(int64(x)) * time.Second
			case 2:
				d += time.Duration(int32(x))
			}
		}
	})
	return d
}

// fields calls f with each length-delimited field of a message (the only
// kind ErrorInfo and RetryInfo have at the level read), skipping the rest.
func fields(b []byte, f func(protowire.Number, []byte)) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return
			}
			f(num, v)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return
		}
		b = b[n:]
	}
}

// LossReason says why a lease was lost. The first four are the broker's
// (the proto's LossReason, same numbers); LossDeadlinePassed is this
// client's own.
type LossReason int32

const (
	// LossExpired: the TTL ran out before a renewal reached the store.
	LossExpired LossReason = 1
	// LossNotOwner: the lease expired and the lock was granted to another
	// owner since.
	LossNotOwner LossReason = 2
	// LossStoreLost: the store lost the lease before its TTL could have
	// run out (Redis restarted empty or was flushed, a memory-store broker
	// restarted).
	LossStoreLost LossReason = 3
	// LossRevoked: an operator revoked the lease.
	LossRevoked LossReason = 4
	// LossDeadlinePassed: no renewal was confirmed before the lease's local
	// deadline (the broker was unreachable, or this process was paused).
	// The broker may not have expired it yet, but could at any moment.
	// Not a broker value.
	LossDeadlinePassed LossReason = 100
)

// String is the proto's name of the reason without its enum prefix
// (EXPIRED for LOSS_REASON_EXPIRED), the one spelling every Leasehold
// client uses, and DEADLINE_PASSED for the client's own.
func (r LossReason) String() string {
	switch r {
	case LossExpired:
		return "EXPIRED"
	case LossNotOwner:
		return "NOT_OWNER"
	case LossStoreLost:
		return "STORE_LOST"
	case LossRevoked:
		return "REVOKED"
	case LossDeadlinePassed:
		return "DEADLINE_PASSED"
	}
	return fmt.Sprintf("LossReason(%d)", int32(r))
}

func (r LossReason) words() string {
	switch r {
	case LossExpired:
		return "it expired"
	case LossNotOwner:
		return "it expired and the lock was granted to another owner"
	case LossStoreLost:
		return "the store lost it"
	case LossRevoked:
		return "an operator revoked it"
	case LossDeadlinePassed:
		return "no renewal was confirmed before its local deadline"
	}
	return r.String()
}

// LostError is a lost lease, as Lease.Err and Lease.Release return it: it
// matches ErrLost, and unwraps to the broker's *Error when a refusal told
// (a Release answered NOT_FOUND).
type LostError struct {
	// Name is the lock name.
	Name string
	// Reason says why.
	Reason LossReason
	// Message is the broker's sentence, if it said one.
	Message string
	err     *Error
}

func (e *LostError) Error() string {
	return fmt.Sprintf("leasehold: lease on %q lost (%s): %s", e.Name, e.Reason, e.Reason.words())
}

// Is makes a LostError match ErrLost.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Unwrap is the broker's refusal that told of the loss, if one did.
func (e *LostError) Unwrap() error {
	if e.err == nil {
		return nil
	}
	return e.err
}

// lostFrom is the LostError of a Release or Renew the broker refused
// because the lease was gone, or nil if err says something else.
func lostFrom(name string, err error) *LostError {
	var e *Error
	if !errors.As(err, &e) {
		return nil
	}
	var reason LossReason
	switch {
	case e.Reason == "LEASE_REVOKED":
		reason = LossRevoked
	case e.Reason == "NOT_OWNER" || (e.Reason == "" && e.Code == codes.FailedPrecondition):
		reason = LossNotOwner
	case e.Reason == "LEASE_NOT_HELD" || (e.Reason == "" && e.Code == codes.NotFound):
		reason = LossExpired
	default:
		return nil
	}
	return &LostError{Name: name, Reason: reason, Message: e.Message, err: e}
}
