package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// memoryS3 is an object store that checks preconditions as S3 does: a PUT
// with If-Match succeeds only while the object's ETag is that one, a PUT
// with If-None-Match: * only while there is no object; otherwise 412. It
// keeps the fence in user metadata, as a string, and the fences of the
// writes it accepted, in order.
type memoryS3 struct {
	mu       sync.Mutex
	objects  map[string]memoryObject
	versions int
	accepted []uint64
	// beforePut, when set, runs once at the next Put, before the store
	// judges it: a writer that slips in between GuardedPut's Head and Put.
	beforePut func()
	failPut   error
}

type memoryObject struct {
	body     string
	etag     string
	metadata map[string]string
}

func newMemoryS3() *memoryS3 { return &memoryS3{objects: map[string]memoryObject{}} }

func (s *memoryS3) Head(_ context.Context, key string) (leasehold.ObjectInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return leasehold.ObjectInfo{}, nil
	}
	fence, err := leasehold.FenceFromMetadata(o.metadata)
	return leasehold.ObjectInfo{Exists: true, ETag: o.etag, Fence: fence}, err
}

func (s *memoryS3) Put(_ context.Context, key string, body []byte, pre leasehold.Precondition, fence uint64) error {
	s.mu.Lock()
	slip := s.beforePut
	s.beforePut = nil
	s.mu.Unlock()
	if slip != nil {
		slip()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failPut != nil {
		return s.failPut
	}
	o, exists := s.objects[key]
	if (pre.IfNoneMatch && exists) || (pre.IfMatch != "" && (!exists || o.etag != pre.IfMatch)) || (pre.IfMatch == "") == !pre.IfNoneMatch {
		return fmt.Errorf("PUT %s: 412 Precondition Failed: %w", key, leasehold.ErrPreconditionFailed)
	}
	s.versions++
	s.objects[key] = memoryObject{body: string(body), etag: strconv.Quote(fmt.Sprintf("v%d", s.versions)), metadata: leasehold.FenceMetadata(fence)}
	s.accepted = append(s.accepted, fence)
	return nil
}

// raw writes without a guard (an object from before fencing, or a writer
// that slips in).
func (s *memoryS3) raw(key, body string, metadata map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.versions++
	s.objects[key] = memoryObject{body: body, etag: strconv.Quote(fmt.Sprintf("v%d", s.versions)), metadata: metadata}
}

func (s *memoryS3) body(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objects[key].body
}

func wantStale(t *testing.T, err error, fence, stored uint64) {
	t.Helper()
	var e *leasehold.StaleFenceError
	if !errors.Is(err, leasehold.ErrStaleFence) || !errors.As(err, &e) || e.Fence != fence || e.Stored != stored {
		t.Fatalf("want a stale fence %d (stored %d), got %v", fence, stored, err)
	}
}

func TestGuardedPut(t *testing.T) {
	t.Parallel()
	ctx := bg(t)
	put := func(s *memoryS3, body string, fence uint64) error {
		return leasehold.GuardedPut(ctx, s, "report.csv", []byte(body), fence)
	}

	t.Run("CreatesEqualPassesLowerIsRefused", func(t *testing.T) {
		s := newMemoryS3()
		for _, w := range []struct {
			body  string
			fence uint64
		}{{"a1", 5}, {"a2", 5}, {"b1", 9}} {
			if err := put(s, w.body, w.fence); err != nil {
				t.Fatal(w.body, err)
			}
		}
		wantStale(t, put(s, "late", 5), 5, 9)
		if got := s.body("report.csv"); got != "b1" {
			t.Fatalf("object holds %q", got)
		}
	})

	t.Run("AnObjectFromBeforeFencing", func(t *testing.T) {
		s := newMemoryS3()
		s.raw("report.csv", "old", nil)
		if err := put(s, "new", 1); err != nil {
			t.Fatal(err)
		}
		s.raw("report.csv", "odd", map[string]string{"Fence": "not a number"})
		if err := put(s, "x", 1); err == nil || errors.Is(err, leasehold.ErrStaleFence) {
			t.Fatalf("unreadable fence metadata: %v", err)
		}
	})

	t.Run("AHigherFenceSlipsInBetweenHeadAndPut", func(t *testing.T) {
		s := newMemoryS3()
		if err := put(s, "a1", 5); err != nil {
			t.Fatal(err)
		}
		s.beforePut = func() { s.raw("report.csv", "b1", leasehold.FenceMetadata(9)) }
		wantStale(t, put(s, "a2", 5), 5, 9) // 412, then a second look
		if got := s.body("report.csv"); got != "b1" {
			t.Fatalf("object holds %q", got)
		}
	})

	t.Run("ALowerFenceSlipsInBetweenHeadAndPut", func(t *testing.T) {
		s := newMemoryS3()
		if err := put(s, "a1", 5); err != nil {
			t.Fatal(err)
		}
		s.beforePut = func() { s.raw("report.csv", "x", leasehold.FenceMetadata(5)) }
		if err := put(s, "b1", 9); err != nil { // 412, then written on the second try
			t.Fatal(err)
		}
		if got := s.body("report.csv"); got != "b1" {
			t.Fatalf("object holds %q", got)
		}
	})

	t.Run("TwoCreatorsRace", func(t *testing.T) {
		s := newMemoryS3()
		s.beforePut = func() { s.raw("report.csv", "b1", leasehold.FenceMetadata(9)) }
		wantStale(t, put(s, "a1", 5), 5, 9) // If-None-Match: * refused
	})

	t.Run("GivesUpUnderEndlessContention", func(t *testing.T) {
		s := newMemoryS3()
		var slip func()
		tries := 0
		slip = func() {
			tries++
			s.raw("report.csv", "other", leasehold.FenceMetadata(1))
			s.beforePut = slip
		}
		s.beforePut = slip
		err := put(s, "a1", 5)
		if !errors.Is(err, leasehold.ErrPreconditionFailed) || errors.Is(err, leasehold.ErrStaleFence) || tries != leasehold.GuardedPutTries {
			t.Fatalf("after %d tries: %v", tries, err)
		}
	})

	t.Run("AStoreErrorIsNotRetried", func(t *testing.T) {
		s := newMemoryS3()
		s.failPut = errors.New("503 Slow Down")
		if err := put(s, "a1", 5); err == nil || errors.Is(err, leasehold.ErrPreconditionFailed) {
			t.Fatalf("got %v", err)
		}
	})

	// Writers with fences 1..16 at once: whoever wins each race, the store
	// never accepts a write below one it accepted before, and the highest
	// fence's write is the one that stays.
	t.Run("ConcurrentWritersNeverGoBack", func(t *testing.T) {
		s := newMemoryS3()
		var wg sync.WaitGroup
		errs := make([]error, 17)
		for f := 1; f <= 16; f++ {
			wg.Add(1)
			go func(f int) {
				defer wg.Done()
				errs[f] = put(s, fmt.Sprint("w", f), uint64(f))
			}(f)
		}
		wg.Wait()
		for i := 1; i < len(s.accepted); i++ {
			if s.accepted[i] < s.accepted[i-1] {
				t.Fatalf("accepted fences in order %v: a lower one after a higher", s.accepted)
			}
		}
		for f := 1; f <= 16; f++ {
			if e := errs[f]; e != nil && !errors.Is(e, leasehold.ErrStaleFence) && !errors.Is(e, leasehold.ErrPreconditionFailed) {
				t.Fatalf("writer %d: %v", f, e)
			}
		}
		if errs[16] == nil && s.body("report.csv") != "w16" {
			t.Fatalf("the highest fence wrote, but the object holds %q", s.body("report.csv"))
		}
	})
}

func TestFenceFromMetadata(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		md   map[string]string
		want uint64
		bad  bool
	}{
		{nil, 0, false},
		{map[string]string{"fence": "42"}, 42, false},
		{map[string]string{"Fence": "7"}, 7, false}, // some SDKs capitalize
		{map[string]string{"fence": "-1"}, 0, true},
	} {
		got, err := leasehold.FenceFromMetadata(c.md)
		if got != c.want || (err != nil) != c.bad {
			t.Errorf("%v: %d %v", c.md, got, err)
		}
	}
	if md := leasehold.FenceMetadata(12); md["fence"] != "12" || len(md) != 1 {
		t.Fatalf("%v", md)
	}
}
