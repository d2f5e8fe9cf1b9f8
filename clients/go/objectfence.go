package leasehold

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// FenceMetadataKey is the user-metadata key an object's fence is kept
// under: x-amz-meta-fence on S3, x-goog-meta-fence on Google Cloud Storage
// (SDKs take it without the prefix).
const FenceMetadataKey = "fence"

// GuardedPutTries bounds GuardedPut's attempts when other writers keep
// winning the race between its look and its write.
const GuardedPutTries = 5

// ErrPreconditionFailed is what an ObjectStore's Put returns when the
// store refused the write for its precondition (HTTP 412 Precondition
// Failed: the object changed, or appeared, since Head). Wrap or return it
// as is: GuardedPut tests it with errors.Is.
var ErrPreconditionFailed = errors.New("leasehold: object store: precondition failed (412)")

// ObjectInfo is what Head learnt of an object.
type ObjectInfo struct {
	// Exists is false when there is no object at the key (Head answered
	// 404): the other fields are then ignored.
	Exists bool
	// ETag is the object's entity tag, as the store sent it (quotes and
	// all): Put's IfMatch gets it back verbatim.
	ETag string
	// Fence is the fence in the object's metadata (FenceMetadataKey); 0 for
	// an object written without one (before fencing: any lease may
	// overwrite it).
	Fence uint64
}

// Precondition is the condition Put must make the store check, atomically
// with the write: exactly one of the two is set.
type Precondition struct {
	// IfMatch: write only if the object's ETag is still this one (S3's and
	// GCS's If-Match header; GCS's ifGenerationMatch does the same with the
	// generation).
	IfMatch string
	// IfNoneMatch: write only if there is no object at the key yet
	// (If-None-Match: *; GCS: ifGenerationMatch=0).
	IfNoneMatch bool
}

// ObjectStore is the part of an object store's SDK GuardedPut needs: an
// adapter of a few lines (README.md shows one for aws-sdk-go-v2's S3).
type ObjectStore interface {
	// Head reads an object's ETag and fence metadata, without its body.
	// A missing object is ObjectInfo{Exists: false} and no error.
	Head(ctx context.Context, key string) (ObjectInfo, error)
	// Put writes body at key with the fence in its metadata
	// (FenceMetadataKey, in decimal: FenceMetadata), only if the
	// precondition holds; an error matching ErrPreconditionFailed when it
	// did not: 412 Precondition Failed, and on S3 also 404 NoSuchKey (an
	// If-Match on an object deleted since Head) and 409
	// ConditionalRequestConflict (a concurrent conditional write), which
	// S3 asks to retry.
	Put(ctx context.Context, key string, body []byte, pre Precondition, fence uint64) error
}

// FenceFromMetadata reads the fence in an object's user metadata as SDKs
// return it (without the x-amz-meta- or x-goog-meta- prefix; the key in any
// case): 0 when there is none (an object from before fencing).
func FenceFromMetadata(md map[string]string) (uint64, error) {
	for k, v := range md {
		if strings.EqualFold(k, FenceMetadataKey) {
			f, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("leasehold: object metadata %s=%q is not a fence", k, v)
			}
			return f, nil
		}
	}
	return 0, nil
}

// FenceMetadata is the user metadata a Put stores the fence in.
func FenceMetadata(fence uint64) map[string]string {
	return map[string]string{FenceMetadataKey: strconv.FormatUint(fence, 10)}
}

// GuardedPut writes body at key in store under a lease's fence, unless the
// object already carries a higher fence: then it returns a
// *StaleFenceError (errors.Is(err, ErrStaleFence)) and writes nothing.
// Equal fences pass (one holder writes an object many times).
//
// An object store cannot compare numbers, but it can refuse a write when
// the object changed since it was read: GuardedPut reads the object's
// fence and ETag (Head), judges the fence, and writes on condition that
// the object is still the one it judged (If-Match: the ETag; If-None-Match:
// * when there was none). A writer that slipped in between makes the store
// answer 412; GuardedPut then looks again (the newcomer's fence may be
// higher: stale), at most GuardedPutTries times in all.
func GuardedPut(ctx context.Context, store ObjectStore, key string, body []byte, fence uint64) error {
	resource := fmt.Sprintf("object %q", key)
	for try := 1; ; try++ {
		info, err := store.Head(ctx, key)
		if err != nil {
			return fmt.Errorf("leasehold: guarded put of %s: head: %w", resource, err)
		}
		var pre Precondition
		if info.Exists {
			if info.Fence > fence {
				return &StaleFenceError{Resource: resource, Fence: fence, Stored: info.Fence}
			}
			if info.ETag == "" {
				return fmt.Errorf("leasehold: guarded put of %s: the store gave no ETag to make the write conditional on", resource)
			}
			pre.IfMatch = info.ETag
		} else {
			pre.IfNoneMatch = true
		}
		err = store.Put(ctx, key, body, pre, fence)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrPreconditionFailed) {
			return fmt.Errorf("leasehold: guarded put of %s: %w", resource, err)
		}
		if try == GuardedPutTries {
			return fmt.Errorf("leasehold: guarded put of %s: the object changed under each of %d tries: %w", resource, try, err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("leasehold: guarded put of %s: %w", resource, err)
		}
	}
}
