package leasehold

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang/protobuf/ptypes/any"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

func str(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// errorInfoBytes encodes a google.rpc.ErrorInfo as the broker sends it.
func errorInfoBytes(reason string, md map[string]string) []byte {
	b := str(nil, 1, reason)
	b = str(b, 2, ErrorDomain)
	for k, v := range md {
		entry := str(str(nil, 1, k), 2, v)
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, entry)
	}
	return b
}

func retryInfoBytes(d time.Duration) []byte {
	var dur []byte
	dur = protowire.AppendTag(dur, 1, protowire.VarintType)
	dur = protowire.AppendVarint(dur, uint64(d/time.Second))
	dur = protowire.AppendTag(dur, 2, protowire.VarintType)
	dur = protowire.AppendVarint(dur, uint64(d%time.Second))
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendBytes(b, dur)
}

func refusal(code codes.Code, msg, reason string, md map[string]string, retry time.Duration) error {
	p := &spb.Status{Code: int32(code), Message: msg, Details: []*any.Any{
		{TypeUrl: "type.googleapis.com/google.rpc.ErrorInfo", Value: errorInfoBytes(reason, md)},
	}}
	if retry > 0 {
		p.Details = append(p.Details, &any.Any{TypeUrl: "type.googleapis.com/google.rpc.RetryInfo", Value: retryInfoBytes(retry)})
	}
	return status.FromProto(p).Err()
}

// The broker's structured refusals, as *Error: reason, metadata, retry
// delay, the kept place, sentinels, and a message in Go's words.
func TestStructuredRefusals(t *testing.T) {
	err := toError(refusal(codes.Aborted, "lock 'jobs/x' is held by 'h' ...; set wait_timeout_ms to wait for it", "LOCK_HELD",
		map[string]string{"name": "jobs/x", "holder": "h:1", "fence": "17", "remaining_ms": "2500", "waited_ms": "0"}, 2500*time.Millisecond),
		`acquire "jobs/x"`, metadata.Pairs(placeMetadata, "0123456789abcdef0123456789abcdef"))
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrLost) {
		t.Fatalf("%#v", err)
	}
	if e.Reason != "LOCK_HELD" || e.Metadata["holder"] != "h:1" || e.RetryDelay != 2500*time.Millisecond || e.place == "" {
		t.Fatalf("%+v", e)
	}
	want := `leasehold: acquire "jobs/x": lock "jobs/x" is held by "h:1" (fence 17) for another 2.5s; waited 0s`
	if err.Error() != want {
		t.Fatalf("message\n%s, not\n%s", err, want)
	}
	if status.Code(err) != codes.Aborted {
		t.Fatal(status.Code(err))
	}

	err = toError(refusal(codes.InvalidArgument, "wait_timeout_ms is 600000; the limit is 5 min (--max-wait)", "BAD_ARGUMENT",
		map[string]string{"argument": "wait", "wait_ms": "600000", "max_wait_ms": "300000"}, 0), `acquire "x"`, nil)
	if !errors.As(err, &e) || e.Metadata["max_wait_ms"] != "300000" || !strings.Contains(err.Error(), "WithWait(10m0s)") || strings.Contains(err.Error(), "wait_timeout_ms") {
		t.Fatalf("%v", err)
	}
	err = toError(refusal(codes.InvalidArgument, "ttl_ms 1 ...", "BAD_ARGUMENT",
		map[string]string{"argument": "ttl", "ttl_ms": "1", "min_ttl_ms": "500", "max_ttl_ms": "3600000"}, 0), `acquire "x"`, nil)
	if !strings.Contains(err.Error(), "WithTTL(1ms) is outside the broker's bounds, 500ms to 1h0m0s") {
		t.Fatalf("%v", err)
	}

	for reason, loss := range map[string]LossReason{"LEASE_REVOKED": LossRevoked, "LEASE_NOT_HELD": LossExpired, "NOT_OWNER": LossNotOwner} {
		code := codes.NotFound
		if reason == "NOT_OWNER" {
			code = codes.FailedPrecondition
		}
		err := toError(refusal(code, "gone", reason, map[string]string{"name": "x", "fence": "3"}, 0), `release "x"`, nil)
		lost := lostFrom("x", err)
		if lost == nil || lost.Reason != loss || !errors.Is(lost, ErrLost) || !errors.As(lost, &e) || e.Reason != reason {
			t.Fatalf("%s: %v", reason, lost)
		}
	}

	// Without details (a broker from before them): the code alone, and
	// the broker's message without a transport prefix.
	err = toError(status.Error(codes.Aborted, "lock 'x' is held"), `acquire "x"`, nil)
	if !errors.Is(err, ErrNotAcquired) || err.Error() != `leasehold: acquire "x": lock 'x' is held` {
		t.Fatalf("%v", err)
	}
	if lost := lostFrom("x", toError(status.Error(codes.NotFound, "no lease"), "", nil)); lost == nil || lost.Reason != LossExpired {
		t.Fatalf("%v", lost)
	}
	err = toError(status.Error(codes.Unavailable, "store timeout"), "describe", nil)
	if err.Error() != "leasehold: describe: UNAVAILABLE: store timeout" {
		t.Fatalf("%v", err)
	}
}

func TestLossReasonNames(t *testing.T) {
	for r, want := range map[LossReason]string{LossExpired: "EXPIRED", LossNotOwner: "NOT_OWNER",
		LossStoreLost: "STORE_LOST", LossRevoked: "REVOKED", LossDeadlinePassed: "DEADLINE_PASSED"} {
		if r.String() != want {
			t.Errorf("%d: %s, not %s", r, r, want)
		}
	}
}
