// Leasehold: named leases with fencing tokens.
//
// This file is the specification of the API for clients in every language.
//
// # Model
//
// A *lease* is exclusive ownership of a lock `name` for a bounded time (its
// TTL). At most one unexpired lease exists per name at any instant, whatever
// the number of clients and broker replicas (they all share one store).
//
// A grant returns two tokens with different jobs:
//
// * `owner_token`: a random secret (128 bits, 32 lowercase hex characters)
//   that proves ownership. Renew and Release act only when it matches the
//   current lease, so a client that lost its lease can never extend or delete
//   the lease of the next holder. Treat it like a password: do not log it.
// * `fence`: a number that is strictly greater than the fence of every earlier
//   grant of the same name. Attach it to every write you make under the lease
//   and have the storage reject a write whose fence is lower than one it has
//   already accepted. That is what keeps a holder that was paused (GC, SIGSTOP,
//   a slow network) past its TTL from corrupting data after the lock moved on:
//   a lease alone cannot prevent that, a fence checked by the storage can.
//
// # What the fence guarantees, and what it does not
//
// * Strictly increasing per name: across broker restarts, across broker
//   replicas sharing one store, and whatever any clock does while the store
//   keeps its data. Fences come from a counter in the store (Redis `INCR`:
//   one key, or one per Redis Cluster hash slot), raised to at least the
//   store clock in microseconds since the Unix epoch and the highest fence
//   the broker replica has seen + 1.
// * Across a Redis restart that lost all data, too: the clock term lands
//   above every fence issued before. The remaining risk: if Redis loses its
//   data *and* its host clock stepped backwards *and* every broker replica
//   restarted, a fence could repeat. Keep Redis persistent and its host on
//   NTP (slewing, not stepping).
// * Not dense: consecutive grants of a name usually differ by much more than 1.
//   Compare fences; never subtract them or count on `+1`.
// * A lock and a semaphore on one name share one sequence; different names
//   are not comparable.
// * Fits a signed 64-bit integer (and, until the year 2255, a JSON number
//   without precision loss), but is typed uint64.
// * A lease can end before its holder learns it (a Redis clock stepped
//   forward expires leases early; a paused holder outlives its TTL): only a
//   storage that refuses lower fences keeps such a holder's late writes out.
//
// # Losses
//
// A lease is *lost* when it ends without its holder's consent: it expired,
// an operator revoked it, or the store lost it. The holder learns it on its
// KeepAlive stream (STATE_LOST, with the reason) or in the answer to Renew or
// Release, and the broker counts it once in `lease_lost_total`, whichever
// replica learns it first. A release, a repeated release, a heartbeat that
// crossed a release, or a stranger's wrong token is not a loss. The store
// keeps a record of how each lease ended for at least 10 seconds: within it, a
// repeated Release with the same token succeeds again (the first did the
// work), a revoked holder hears LOSS_REASON_REVOKED even after the lock was
// granted again, and an expired holder hears that its lease expired.
//
// # Deadlines
//
// Every grant and renewal reports `ttl_ms`, the validity the store applied.
// A client must compute its own deadline as (time it *sent* the request) +
// `ttl_ms`, so that network latency and clock skew can only make its idea of
// the lease end too early, never too late.
//
// # Authentication and tenants
//
// A broker started with an `--auth-file` admits a call by its metadata
// `authorization: Bearer <token>`, or by the client certificate of a
// mutual-TLS connection, and maps it to a *tenant*. Each tenant has its own
// namespace of lock names: tenant A's lock "x" and tenant B's lock "x" are two
// locks, and no name or owner token of A's reaches a lock of B's. A credential
// carries permissions: `use` (every call on the tenant's own locks) and
// `admin` (Revoke, and Describe of any tenant's locks through the `tenant`
// field). Without an --auth-file every caller shares one namespace, the root
// namespace (tenant `@root`: an auth file that maps credentials to it keeps
// their locks where they were), and Revoke is allowed exactly when the broker
// runs with --enable-revoke. The health
// and reflection services and the metrics port stay open.
//
// # Errors
//
// Calls fail with a standard gRPC status; its message is for people (it
// says what is wrong in the caller's words and names the limit and the
// broker flag involved; it may change between versions). For programs,
// every status also carries, in its details (the `grpc-status-details-bin`
// trailer: a google.rpc.Status), a google.rpc.ErrorInfo with domain
// "leasehold.v1", a stable `reason` and `metadata` (every value a string;
// durations in milliseconds), and, where a retry may succeed after a known
// time, a google.rpc.RetryInfo. A Session stream's SessionError carries the
// same fields. By code and reason:
//
// * INVALID_ARGUMENT, BAD_ARGUMENT: an argument outside its limits.
//   metadata `argument` names it in neutral words (name, also an
//   election's; ttl, wait, lock_delay, limit, holder, also an election's
//   value; owner_token, place, tenant, request: a malformed Session
//   request), with the value sent and the limit: for `wait`, `wait_ms` and
//   `max_wait_ms` (the broker's --max-wait: a client chains longer waits
//   with keep_place); for `ttl`, `ttl_ms`, `min_ttl_ms`, `max_ttl_ms`; for
//   `lock_delay`, `lock_delay_ms`, `max_lock_delay_ms`; for `limit`,
//   `limit` and `max_limit`; for `name` and `holder`, `max_name_len` and
//   `max_holder_len`.
// * ABORTED: Acquire did not obtain the lock (no wait was requested, or the
//   wait ran out). LOCK_HELD: `name`, `holder`, `fence`, `remaining_ms`,
//   `waited_ms`, and RetryInfo (the time left on the lease); LOCK_DELAY:
//   the name is in its lock-delay, `name`, `fence` (of the lease that
//   ended), `remaining_ms`, `waited_ms`, and RetryInfo; LINE_AHEAD: callers
//   who queued earlier come first, `name`, `queued`, `waited_ms`. With
//   keep_place, also `place_kept_ms` (the place itself rides in the
//   `leasehold-place` trailing metadata).
// * NOT_FOUND, LEASE_NOT_HELD (`name`): Renew or Release of a lease that no
//   longer exists (it expired, was released, or the store lost it). An
//   expired lease's own token gets it even once someone else holds the
//   name, while the store remembers how that token's lease ended (10
//   seconds). NOT_FOUND, LEASE_REVOKED (`name`, `fence`): an operator
//   revoked it.
// * FAILED_PRECONDITION, NOT_OWNER (`name`, `fence` of the current
//   holder): Renew or Release with an owner token that is not the current
//   holder's, and that the store does not remember (a stranger's token, or
//   one whose lease ended longer ago).
// * UNAUTHENTICATED (reason UNAUTHENTICATED): the broker requires
//   credentials and the call has none it accepts.
// * PERMISSION_DENIED (reason PERMISSION_DENIED): the credential lacks the
//   permission the call needs (`admin` for Revoke and for other tenants'
//   locks; `use` for the rest).
// * RESOURCE_EXHAUSTED, LIMIT_REACHED: a cap was reached (concurrent
//   waiters on this broker replica, or a tenant's or a connection's cap on
//   leases, waiters, streams, buffered bytes or requests per second);
//   `limit` is the cap's broker flag without its dashes (`max-waiters`,
//   `tenant-max-rate`...); RetryInfo for a rate cap.
// * UNAVAILABLE, UNAVAILABLE: the store did not answer within the store
//   timeout (about a second), or the broker is shutting down. Safe to
//   retry, on any replica; RetryInfo says how soon on this one.
// * DEADLINE_EXCEEDED, REQUEST_TIMEOUT (`timeout_ms`): a Session request ran
//   past its own timeout.
// * CANCELLED, INTERNAL: the reason is the code's name.

// Code generated by protoc-gen-go. DO NOT EDIT.
// versions:
// 	protoc-gen-go v1.28.1
// 	protoc        v3.21.12
// source: leasehold/v1/leasehold.proto

package leaseholdv1

import (
	protoreflect "google.golang.org/protobuf/reflect/protoreflect"
	protoimpl "google.golang.org/protobuf/runtime/protoimpl"
	reflect "reflect"
	sync "sync"
)

const (
	// Verify that this generated code is sufficiently up-to-date.
	_ = protoimpl.EnforceVersion(20 - protoimpl.MinVersion)
	// Verify that runtime/protoimpl is sufficiently up-to-date.
	_ = protoimpl.EnforceVersion(protoimpl.MaxVersion - 20)
)

// Why a lease was lost.
type LossReason int32

const (
	// Not a loss: the value of `reason` when the state is not STATE_LOST.
	LossReason_LOSS_REASON_UNSPECIFIED LossReason = 0
	// The TTL ran out before a renewal reached the store (whoever holds the
	// name now).
	LossReason_LOSS_REASON_EXPIRED LossReason = 1
	// The lease expired and the lock was granted to another owner since, and
	// the store no longer remembers this token's lease (it does for 10 seconds
	// after its end: then LOSS_REASON_EXPIRED).
	LossReason_LOSS_REASON_NOT_OWNER LossReason = 2
	// The store lost the lease before its TTL could have run out (Redis
	// restarted empty, was flushed, or the key was deleted).
	LossReason_LOSS_REASON_STORE_LOST LossReason = 3
	// An operator revoked the lease.
	LossReason_LOSS_REASON_REVOKED LossReason = 4
)

// Enum value maps for LossReason.
var (
	LossReason_name = map[int32]string{
		0: "LOSS_REASON_UNSPECIFIED",
		1: "LOSS_REASON_EXPIRED",
		2: "LOSS_REASON_NOT_OWNER",
		3: "LOSS_REASON_STORE_LOST",
		4: "LOSS_REASON_REVOKED",
	}
	LossReason_value = map[string]int32{
		"LOSS_REASON_UNSPECIFIED": 0,
		"LOSS_REASON_EXPIRED":     1,
		"LOSS_REASON_NOT_OWNER":   2,
		"LOSS_REASON_STORE_LOST":  3,
		"LOSS_REASON_REVOKED":     4,
	}
)

func (x LossReason) Enum() *LossReason {
	p := new(LossReason)
	*p = x
	return p
}

func (x LossReason) String() string {
	return protoimpl.X.EnumStringOf(x.Descriptor(), protoreflect.EnumNumber(x))
}

func (LossReason) Descriptor() protoreflect.EnumDescriptor {
	return file_leasehold_v1_leasehold_proto_enumTypes[0].Descriptor()
}

func (LossReason) Type() protoreflect.EnumType {
	return &file_leasehold_v1_leasehold_proto_enumTypes[0]
}

func (x LossReason) Number() protoreflect.EnumNumber {
	return protoreflect.EnumNumber(x)
}

// Deprecated: Use LossReason.Descriptor instead.
func (LossReason) EnumDescriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{0}
}

// The broker's verdict on one lease of a heartbeat.
type LeaseStatus_State int32

const (
	// Never sent by the broker (the proto3 default); treat it as
	// STATE_UNCONFIRMED.
	LeaseStatus_STATE_UNSPECIFIED LeaseStatus_State = 0
	// Renewed: valid for `ttl_ms` from when the store applied the renewal.
	LeaseStatus_STATE_ALIVE LeaseStatus_State = 1
	// Gone for good: `reason` says why. Stop acting on it before your next
	// write; acquire again if you need the lock.
	LeaseStatus_STATE_LOST LeaseStatus_State = 2
	// The store did not answer (UNAVAILABLE): the lease may still be alive
	// until its deadline. Keep sending heartbeats; stop acting on the lease
	// when your own deadline passes.
	LeaseStatus_STATE_UNCONFIRMED LeaseStatus_State = 3
	// The entry is malformed (name or token outside the limits); `message`
	// says what is wrong. It can never match a lease.
	LeaseStatus_STATE_REJECTED LeaseStatus_State = 4
)

// Enum value maps for LeaseStatus_State.
var (
	LeaseStatus_State_name = map[int32]string{
		0: "STATE_UNSPECIFIED",
		1: "STATE_ALIVE",
		2: "STATE_LOST",
		3: "STATE_UNCONFIRMED",
		4: "STATE_REJECTED",
	}
	LeaseStatus_State_value = map[string]int32{
		"STATE_UNSPECIFIED": 0,
		"STATE_ALIVE":       1,
		"STATE_LOST":        2,
		"STATE_UNCONFIRMED": 3,
		"STATE_REJECTED":    4,
	}
)

func (x LeaseStatus_State) Enum() *LeaseStatus_State {
	p := new(LeaseStatus_State)
	*p = x
	return p
}

func (x LeaseStatus_State) String() string {
	return protoimpl.X.EnumStringOf(x.Descriptor(), protoreflect.EnumNumber(x))
}

func (LeaseStatus_State) Descriptor() protoreflect.EnumDescriptor {
	return file_leasehold_v1_leasehold_proto_enumTypes[1].Descriptor()
}

func (LeaseStatus_State) Type() protoreflect.EnumType {
	return &file_leasehold_v1_leasehold_proto_enumTypes[1]
}

func (x LeaseStatus_State) Number() protoreflect.EnumNumber {
	return protoreflect.EnumNumber(x)
}

// Deprecated: Use LeaseStatus_State.Descriptor instead.
func (LeaseStatus_State) EnumDescriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{20, 0}
}

// A granted lease.
type Lease struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lock name, as requested.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// Secret proof of ownership: 32 lowercase hex characters (128 random bits).
	// Present it to Renew and Release. Never logged by the broker.
	OwnerToken string `protobuf:"bytes,2,opt,name=owner_token,json=ownerToken,proto3" json:"owner_token,omitempty"`
	// Fencing token: strictly greater than every earlier grant of this name
	// (see the file comment for what it does and does not promise).
	Fence uint64 `protobuf:"varint,3,opt,name=fence,proto3" json:"fence,omitempty"`
	// How long the lease is valid, in milliseconds, counted from the moment the
	// store applied it. Compute your deadline from the time you sent the
	// request (plus AcquireResponse.waited_ms if the call waited).
	TtlMs uint64 `protobuf:"varint,4,opt,name=ttl_ms,json=ttlMs,proto3" json:"ttl_ms,omitempty"`
}

func (x *Lease) Reset() {
	*x = Lease{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[0]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *Lease) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*Lease) ProtoMessage() {}

func (x *Lease) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[0]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use Lease.ProtoReflect.Descriptor instead.
func (*Lease) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{0}
}

func (x *Lease) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *Lease) GetOwnerToken() string {
	if x != nil {
		return x.OwnerToken
	}
	return ""
}

func (x *Lease) GetFence() uint64 {
	if x != nil {
		return x.Fence
	}
	return 0
}

func (x *Lease) GetTtlMs() uint64 {
	if x != nil {
		return x.TtlMs
	}
	return 0
}

// Acquire's request: which lock, for how long, and how long to wait.
type AcquireRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lock name: 1 to 256 bytes of `[A-Za-z0-9._:/-]` (the broker's
	// configured limits apply). Names are case-sensitive.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// Lease time-to-live in milliseconds. 0 means the broker's default (10 s
	// unless configured), or, with ttl_auto, a TTL the broker chooses. Must
	// lie within the broker's bounds (500 ms to 1 h unless configured), or
	// the call fails with INVALID_ARGUMENT.
	TtlMs uint64 `protobuf:"varint,2,opt,name=ttl_ms,json=ttlMs,proto3" json:"ttl_ms,omitempty"`
	// A label that tells people who holds the lock: a pod name, host:pid, a job
	// id. Shown by Describe. At most 256 bytes of printable characters; may be
	// empty.
	Holder string `protobuf:"bytes,3,opt,name=holder,proto3" json:"holder,omitempty"`
	// How long to wait for the lock if it is held, in milliseconds. 0 tries
	// once and fails with ABORTED if the lock is held (or if callers are queued
	// for it: a try never jumps the line). At most the broker's maximum wait
	// (5 minutes unless configured).
	//
	// Waiting callers are served in arrival order across all broker replicas
	// (the queue lives in the store). A caller keeps its place only while its
	// call is alive: when it is cancelled or times out it leaves the queue at
	// once, and the callers of a broker that died leave within 3 seconds
	// (unless it keeps its place: see keep_place).
	WaitTimeoutMs uint64 `protobuf:"varint,4,opt,name=wait_timeout_ms,json=waitTimeoutMs,proto3" json:"wait_timeout_ms,omitempty"`
	// Lock-delay in milliseconds (Chubby, Consul): if this lease ends
	// involuntarily (it expires, or is revoked), nobody gets the lock for this
	// long afterwards, so that a holder that was paused or cut off has time to
	// notice and stop before the next holder starts. A release starts no
	// delay. 0 (the default) for none; at most --max-lock-delay (1 minute
	// unless configured). Acquire calls refused because of it fail with ABORTED
	// and say so.
	LockDelayMs uint64 `protobuf:"varint,5,opt,name=lock_delay_ms,json=lockDelayMs,proto3" json:"lock_delay_ms,omitempty"`
	// Semaphore: how many leases `name` may have at once (0 or 1: a lock).
	// Each permit is a lease of its own, with its own owner token and fence
	// (fences strictly increase over all the permits of the name), renewed and
	// released like any lease; release and expiry free one permit, and waiters
	// are served in arrival order as for a lock. Every caller of a name must
	// use the same limit. A name held as a lock has no permits, and the other
	// way round. No lock-delay for semaphores. At most --max-semaphore-limit
	// (1000 unless configured).
	Limit uint32 `protobuf:"varint,6,opt,name=limit,proto3" json:"limit,omitempty"`
	// Keep the caller's place in line when the wait runs out: an Acquire that
	// waited (wait_timeout_ms > 0) and ends without the lock at the end of its
	// wait fails with ABORTED as usual, but leaves its place in the name's
	// line for 3 seconds instead of giving it up, and the status carries the
	// place in the trailing metadata `leasehold-place` (ASCII). Pass it as
	// `place` to the next Acquire within those 3 seconds to go on waiting in
	// the same position: a wait longer than the broker's maximum, made of
	// calls one after the other, that no caller who arrived later overtakes.
	// A place not taken back lapses after the 3 seconds (meanwhile it holds
	// up the callers behind it, as a waiter would). A call ended by the
	// broker's shutdown keeps its place too: it fails with UNAVAILABLE ("the
	// broker is shutting down"), carrying the place in the same metadata, to
	// pass to an Acquire on another replica (a rolling restart sends nobody to
	// the back of the line). A call cancelled or ended by an error gives up
	// its place as usual, and so does every call without keep_place.
	KeepPlace bool `protobuf:"varint,7,opt,name=keep_place,json=keepPlace,proto3" json:"keep_place,omitempty"`
	// A place returned by an earlier Acquire with keep_place (the
	// `leasehold-place` metadata of its ABORTED status): this call waits in
	// that place, in the same position, if it is still in the name's line,
	// else it joins at the back with a fresh owner token, as a new caller
	// does (a place is never taken on its word: no caller chooses its owner
	// token). Empty for a new place. 32 lowercase
	// hex characters, like an owner token, or the call fails with
	// INVALID_ARGUMENT. The place is a secret like an owner token (it becomes
	// the owner token of the lease if this call is granted): the broker only
	// ever returns it to its caller and never logs it in full; do not share
	// or log it either.
	Place string `protobuf:"bytes,8,opt,name=place,proto3" json:"place,omitempty"`
	// Let the broker choose the TTL from the heartbeat round trips it has
	// measured: 10 times their 99th percentile, at least --ttl-auto-floor
	// (10 s unless configured), within the broker's bounds (see TtlAdvice).
	// On a Session stream, the stream's own round trips; on a unary call,
	// those of the caller's tenant's streams on this replica; none measured
	// yet, the floor. The lease carries the TTL chosen. ttl_ms must be 0.
	TtlAuto bool `protobuf:"varint,9,opt,name=ttl_auto,json=ttlAuto,proto3" json:"ttl_auto,omitempty"`
}

func (x *AcquireRequest) Reset() {
	*x = AcquireRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[1]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *AcquireRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*AcquireRequest) ProtoMessage() {}

func (x *AcquireRequest) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[1]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use AcquireRequest.ProtoReflect.Descriptor instead.
func (*AcquireRequest) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{1}
}

func (x *AcquireRequest) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *AcquireRequest) GetTtlMs() uint64 {
	if x != nil {
		return x.TtlMs
	}
	return 0
}

func (x *AcquireRequest) GetHolder() string {
	if x != nil {
		return x.Holder
	}
	return ""
}

func (x *AcquireRequest) GetWaitTimeoutMs() uint64 {
	if x != nil {
		return x.WaitTimeoutMs
	}
	return 0
}

func (x *AcquireRequest) GetLockDelayMs() uint64 {
	if x != nil {
		return x.LockDelayMs
	}
	return 0
}

func (x *AcquireRequest) GetLimit() uint32 {
	if x != nil {
		return x.Limit
	}
	return 0
}

func (x *AcquireRequest) GetKeepPlace() bool {
	if x != nil {
		return x.KeepPlace
	}
	return false
}

func (x *AcquireRequest) GetPlace() string {
	if x != nil {
		return x.Place
	}
	return ""
}

func (x *AcquireRequest) GetTtlAuto() bool {
	if x != nil {
		return x.TtlAuto
	}
	return false
}

// Acquire's answer: the granted lease.
type AcquireResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The granted lease.
	Lease *Lease `protobuf:"bytes,1,opt,name=lease,proto3" json:"lease,omitempty"`
	// How long the call waited for the lock, in milliseconds: from its
	// arrival to the sending of the store attempt that got the grant (0 if the
	// lock was free). The lease started no sooner than (your send time +
	// waited_ms), so compute the deadline of a waited-for lease as
	// send time + waited_ms + ttl_ms.
	WaitedMs uint64 `protobuf:"varint,2,opt,name=waited_ms,json=waitedMs,proto3" json:"waited_ms,omitempty"`
}

func (x *AcquireResponse) Reset() {
	*x = AcquireResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[2]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *AcquireResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*AcquireResponse) ProtoMessage() {}

func (x *AcquireResponse) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[2]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use AcquireResponse.ProtoReflect.Descriptor instead.
func (*AcquireResponse) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{2}
}

func (x *AcquireResponse) GetLease() *Lease {
	if x != nil {
		return x.Lease
	}
	return nil
}

func (x *AcquireResponse) GetWaitedMs() uint64 {
	if x != nil {
		return x.WaitedMs
	}
	return 0
}

// Renew's request: the lease to extend, and for how long.
type RenewRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lock name.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// The owner token from the grant.
	OwnerToken string `protobuf:"bytes,2,opt,name=owner_token,json=ownerToken,proto3" json:"owner_token,omitempty"`
	// The new time-to-live, from now, in milliseconds. 0 keeps the TTL the
	// lease was granted (or last renewed) with. Same bounds as Acquire.
	TtlMs uint64 `protobuf:"varint,3,opt,name=ttl_ms,json=ttlMs,proto3" json:"ttl_ms,omitempty"`
	// Renew for a TTL the broker chooses, as AcquireRequest.ttl_auto; ttl_ms
	// must be 0.
	TtlAuto bool `protobuf:"varint,4,opt,name=ttl_auto,json=ttlAuto,proto3" json:"ttl_auto,omitempty"`
}

func (x *RenewRequest) Reset() {
	*x = RenewRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[3]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *RenewRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*RenewRequest) ProtoMessage() {}

func (x *RenewRequest) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[3]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use RenewRequest.ProtoReflect.Descriptor instead.
func (*RenewRequest) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{3}
}

func (x *RenewRequest) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *RenewRequest) GetOwnerToken() string {
	if x != nil {
		return x.OwnerToken
	}
	return ""
}

func (x *RenewRequest) GetTtlMs() uint64 {
	if x != nil {
		return x.TtlMs
	}
	return 0
}

func (x *RenewRequest) GetTtlAuto() bool {
	if x != nil {
		return x.TtlAuto
	}
	return false
}

// Renew's answer: the lease's new validity.
type RenewResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// How long the lease is now valid, in milliseconds, from the moment the
	// store applied the renewal. Compute your new deadline from the time you
	// sent the request.
	TtlMs uint64 `protobuf:"varint,1,opt,name=ttl_ms,json=ttlMs,proto3" json:"ttl_ms,omitempty"`
	// The lease's fence (unchanged by renewal).
	Fence uint64 `protobuf:"varint,2,opt,name=fence,proto3" json:"fence,omitempty"`
}

func (x *RenewResponse) Reset() {
	*x = RenewResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[4]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *RenewResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*RenewResponse) ProtoMessage() {}

func (x *RenewResponse) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[4]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use RenewResponse.ProtoReflect.Descriptor instead.
func (*RenewResponse) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{4}
}

func (x *RenewResponse) GetTtlMs() uint64 {
	if x != nil {
		return x.TtlMs
	}
	return 0
}

func (x *RenewResponse) GetFence() uint64 {
	if x != nil {
		return x.Fence
	}
	return 0
}

// Release's request: the lease to end.
type ReleaseRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lock name.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// The owner token from the grant.
	OwnerToken string `protobuf:"bytes,2,opt,name=owner_token,json=ownerToken,proto3" json:"owner_token,omitempty"`
}

func (x *ReleaseRequest) Reset() {
	*x = ReleaseRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[5]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *ReleaseRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ReleaseRequest) ProtoMessage() {}

func (x *ReleaseRequest) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[5]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ReleaseRequest.ProtoReflect.Descriptor instead.
func (*ReleaseRequest) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{5}
}

func (x *ReleaseRequest) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *ReleaseRequest) GetOwnerToken() string {
	if x != nil {
		return x.OwnerToken
	}
	return ""
}

// Release's answer: empty; success is the answer.
type ReleaseResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields
}

func (x *ReleaseResponse) Reset() {
	*x = ReleaseResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[6]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *ReleaseResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ReleaseResponse) ProtoMessage() {}

func (x *ReleaseResponse) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[6]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ReleaseResponse.ProtoReflect.Descriptor instead.
func (*ReleaseResponse) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{6}
}

// Describe's request: the lock to look at.
type DescribeRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lock name.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// The tenant whose lock `name` is: empty for the caller's own. Another
	// tenant's needs the `admin` permission (PERMISSION_DENIED otherwise).
	// `@root` is the root namespace: the locks of callers of a broker without
	// an --auth-file, and of credentials the auth file maps to `@root`.
	Tenant string `protobuf:"bytes,2,opt,name=tenant,proto3" json:"tenant,omitempty"`
}

func (x *DescribeRequest) Reset() {
	*x = DescribeRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[7]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *DescribeRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*DescribeRequest) ProtoMessage() {}

func (x *DescribeRequest) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[7]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use DescribeRequest.ProtoReflect.Descriptor instead.
func (*DescribeRequest) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{7}
}

func (x *DescribeRequest) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *DescribeRequest) GetTenant() string {
	if x != nil {
		return x.Tenant
	}
	return ""
}

// Describe's answer: the lock's current lease, if any, and its waiters.
type DescribeResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// Whether an unexpired lease exists on the name. When false, the fields
	// below are zero or empty.
	Held bool `protobuf:"varint,1,opt,name=held,proto3" json:"held,omitempty"`
	// The holder label given at Acquire.
	Holder string `protobuf:"bytes,2,opt,name=holder,proto3" json:"holder,omitempty"`
	// The current lease's fence.
	Fence uint64 `protobuf:"varint,3,opt,name=fence,proto3" json:"fence,omitempty"`
	// Time left before the lease expires unless renewed, in milliseconds.
	RemainingMs uint64 `protobuf:"varint,4,opt,name=remaining_ms,json=remainingMs,proto3" json:"remaining_ms,omitempty"`
	// The TTL the lease was granted or last renewed with, in milliseconds.
	TtlMs uint64 `protobuf:"varint,5,opt,name=ttl_ms,json=ttlMs,proto3" json:"ttl_ms,omitempty"`
	// When the lease was granted, in milliseconds since the Unix epoch, by the
	// store's clock.
	GrantedAtUnixMs uint64 `protobuf:"varint,6,opt,name=granted_at_unix_ms,json=grantedAtUnixMs,proto3" json:"granted_at_unix_ms,omitempty"`
	// Callers currently waiting in Acquire for this name on the broker replica
	// that answered (not across replicas).
	LocalWaiters uint32 `protobuf:"varint,7,opt,name=local_waiters,json=localWaiters,proto3" json:"local_waiters,omitempty"`
	// The lease's lock-delay, in milliseconds.
	LockDelayMs uint64 `protobuf:"varint,8,opt,name=lock_delay_ms,json=lockDelayMs,proto3" json:"lock_delay_ms,omitempty"`
	// When not held: time left of the lock-delay of the lease that ended
	// involuntarily (0 if none). Acquire fails until it runs out.
	LockDelayRemainingMs uint64 `protobuf:"varint,9,opt,name=lock_delay_remaining_ms,json=lockDelayRemainingMs,proto3" json:"lock_delay_remaining_ms,omitempty"`
	// Callers queued for this name in Acquire, on every broker replica.
	Waiters uint64 `protobuf:"varint,10,opt,name=waiters,proto3" json:"waiters,omitempty"`
	// Semaphore permits held now (0 for a lock; `held` is false for a
	// semaphore, whose permits have no single holder).
	PermitsHeld uint64 `protobuf:"varint,11,opt,name=permits_held,json=permitsHeld,proto3" json:"permits_held,omitempty"`
}

func (x *DescribeResponse) Reset() {
	*x = DescribeResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[8]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *DescribeResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*DescribeResponse) ProtoMessage() {}

func (x *DescribeResponse) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[8]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use DescribeResponse.ProtoReflect.Descriptor instead.
func (*DescribeResponse) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{8}
}

func (x *DescribeResponse) GetHeld() bool {
	if x != nil {
		return x.Held
	}
	return false
}

func (x *DescribeResponse) GetHolder() string {
	if x != nil {
		return x.Holder
	}
	return ""
}

func (x *DescribeResponse) GetFence() uint64 {
	if x != nil {
		return x.Fence
	}
	return 0
}

func (x *DescribeResponse) GetRemainingMs() uint64 {
	if x != nil {
		return x.RemainingMs
	}
	return 0
}

func (x *DescribeResponse) GetTtlMs() uint64 {
	if x != nil {
		return x.TtlMs
	}
	return 0
}

func (x *DescribeResponse) GetGrantedAtUnixMs() uint64 {
	if x != nil {
		return x.GrantedAtUnixMs
	}
	return 0
}

func (x *DescribeResponse) GetLocalWaiters() uint32 {
	if x != nil {
		return x.LocalWaiters
	}
	return 0
}

func (x *DescribeResponse) GetLockDelayMs() uint64 {
	if x != nil {
		return x.LockDelayMs
	}
	return 0
}

func (x *DescribeResponse) GetLockDelayRemainingMs() uint64 {
	if x != nil {
		return x.LockDelayRemainingMs
	}
	return 0
}

func (x *DescribeResponse) GetWaiters() uint64 {
	if x != nil {
		return x.Waiters
	}
	return 0
}

func (x *DescribeResponse) GetPermitsHeld() uint64 {
	if x != nil {
		return x.PermitsHeld
	}
	return 0
}

// List's request: which names, and where to go on.
type ListRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// Only names that start with this (empty: every name). The lock-name
	// alphabet applies, and the name length limit.
	Prefix string `protobuf:"bytes,1,opt,name=prefix,proto3" json:"prefix,omitempty"`
	// The tenant whose locks to list: empty for the caller's own; another
	// tenant's (`@root` for the root namespace, as in DescribeRequest.tenant)
	// or `*` for every tenant's need the `admin` permission.
	Tenant string `protobuf:"bytes,2,opt,name=tenant,proto3" json:"tenant,omitempty"`
	// The most names one call looks at in the store: 0 for the default (100);
	// at most 1000 (INVALID_ARGUMENT past it).
	PageSize uint32 `protobuf:"varint,3,opt,name=page_size,json=pageSize,proto3" json:"page_size,omitempty"`
	// Where to go on: the `next_page_token` of the previous answer, with the
	// same `prefix` and `tenant`; empty for the first page.
	PageToken string `protobuf:"bytes,4,opt,name=page_token,json=pageToken,proto3" json:"page_token,omitempty"`
}

func (x *ListRequest) Reset() {
	*x = ListRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[9]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *ListRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ListRequest) ProtoMessage() {}

func (x *ListRequest) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[9]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ListRequest.ProtoReflect.Descriptor instead.
func (*ListRequest) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{9}
}

func (x *ListRequest) GetPrefix() string {
	if x != nil {
		return x.Prefix
	}
	return ""
}

func (x *ListRequest) GetTenant() string {
	if x != nil {
		return x.Tenant
	}
	return ""
}

func (x *ListRequest) GetPageSize() uint32 {
	if x != nil {
		return x.PageSize
	}
	return 0
}

func (x *ListRequest) GetPageToken() string {
	if x != nil {
		return x.PageToken
	}
	return ""
}

// List's answer: one page.
type ListResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The names of the page with something on them, each page in name order.
	Locks []*ListedLock `protobuf:"bytes,1,rep,name=locks,proto3" json:"locks,omitempty"`
	// Empty when the walk is done; otherwise pass it as `page_token` for the
	// next page. Opaque: its form differs between stores.
	NextPageToken string `protobuf:"bytes,2,opt,name=next_page_token,json=nextPageToken,proto3" json:"next_page_token,omitempty"`
}

func (x *ListResponse) Reset() {
	*x = ListResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[10]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *ListResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ListResponse) ProtoMessage() {}

func (x *ListResponse) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[10]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ListResponse.ProtoReflect.Descriptor instead.
func (*ListResponse) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{10}
}

func (x *ListResponse) GetLocks() []*ListedLock {
	if x != nil {
		return x.Locks
	}
	return nil
}

func (x *ListResponse) GetNextPageToken() string {
	if x != nil {
		return x.NextPageToken
	}
	return ""
}

// One name in a listing: its state as Describe would tell it.
type ListedLock struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lock name, as its holders name it (without the tenant).
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// The tenant whose lock it is (`@root` for the root namespace).
	Tenant string `protobuf:"bytes,2,opt,name=tenant,proto3" json:"tenant,omitempty"`
	// Whether a lock lease holds it (false for a semaphore, whose permits
	// have no single holder).
	Held bool `protobuf:"varint,3,opt,name=held,proto3" json:"held,omitempty"`
	// The holder label of the lease (an election's leader's value).
	Holder string `protobuf:"bytes,4,opt,name=holder,proto3" json:"holder,omitempty"`
	// The lease's fence (an election's term).
	Fence uint64 `protobuf:"varint,5,opt,name=fence,proto3" json:"fence,omitempty"`
	// Time left before the lease expires unless renewed, in milliseconds.
	RemainingMs uint64 `protobuf:"varint,6,opt,name=remaining_ms,json=remainingMs,proto3" json:"remaining_ms,omitempty"`
	// The TTL the lease was granted or last renewed with, in milliseconds.
	TtlMs uint64 `protobuf:"varint,7,opt,name=ttl_ms,json=ttlMs,proto3" json:"ttl_ms,omitempty"`
	// When the lease was granted, in milliseconds since the Unix epoch, by the
	// store's clock.
	GrantedAtUnixMs uint64 `protobuf:"varint,8,opt,name=granted_at_unix_ms,json=grantedAtUnixMs,proto3" json:"granted_at_unix_ms,omitempty"`
	// Callers queued for the name, on every broker replica.
	Waiters uint64 `protobuf:"varint,9,opt,name=waiters,proto3" json:"waiters,omitempty"`
	// Semaphore permits held now (0 for a lock).
	PermitsHeld uint64 `protobuf:"varint,10,opt,name=permits_held,json=permitsHeld,proto3" json:"permits_held,omitempty"`
	// When not held: time left of the lock-delay of the lease that ended
	// involuntarily (0 if none).
	LockDelayRemainingMs uint64 `protobuf:"varint,11,opt,name=lock_delay_remaining_ms,json=lockDelayRemainingMs,proto3" json:"lock_delay_remaining_ms,omitempty"`
}

func (x *ListedLock) Reset() {
	*x = ListedLock{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[11]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *ListedLock) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ListedLock) ProtoMessage() {}

func (x *ListedLock) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[11]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ListedLock.ProtoReflect.Descriptor instead.
func (*ListedLock) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{11}
}

func (x *ListedLock) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *ListedLock) GetTenant() string {
	if x != nil {
		return x.Tenant
	}
	return ""
}

func (x *ListedLock) GetHeld() bool {
	if x != nil {
		return x.Held
	}
	return false
}

func (x *ListedLock) GetHolder() string {
	if x != nil {
		return x.Holder
	}
	return ""
}

func (x *ListedLock) GetFence() uint64 {
	if x != nil {
		return x.Fence
	}
	return 0
}

func (x *ListedLock) GetRemainingMs() uint64 {
	if x != nil {
		return x.RemainingMs
	}
	return 0
}

func (x *ListedLock) GetTtlMs() uint64 {
	if x != nil {
		return x.TtlMs
	}
	return 0
}

func (x *ListedLock) GetGrantedAtUnixMs() uint64 {
	if x != nil {
		return x.GrantedAtUnixMs
	}
	return 0
}

func (x *ListedLock) GetWaiters() uint64 {
	if x != nil {
		return x.Waiters
	}
	return 0
}

func (x *ListedLock) GetPermitsHeld() uint64 {
	if x != nil {
		return x.PermitsHeld
	}
	return 0
}

func (x *ListedLock) GetLockDelayRemainingMs() uint64 {
	if x != nil {
		return x.LockDelayRemainingMs
	}
	return 0
}

// CheckFence's request: the fence a writer presents for a lock.
type CheckFenceRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lock name.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// The fence the writer presents.
	Fence uint64 `protobuf:"varint,2,opt,name=fence,proto3" json:"fence,omitempty"`
}

func (x *CheckFenceRequest) Reset() {
	*x = CheckFenceRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[12]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *CheckFenceRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*CheckFenceRequest) ProtoMessage() {}

func (x *CheckFenceRequest) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[12]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use CheckFenceRequest.ProtoReflect.Descriptor instead.
func (*CheckFenceRequest) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{12}
}

func (x *CheckFenceRequest) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *CheckFenceRequest) GetFence() uint64 {
	if x != nil {
		return x.Fence
	}
	return 0
}

// CheckFence's answer: whether that fence is the current lease's.
type CheckFenceResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// True if `fence` is the fence of the lease that holds `name` now.
	Current bool `protobuf:"varint,1,opt,name=current,proto3" json:"current,omitempty"`
	// The fence of the lease that holds `name` now; 0 if the name is free.
	CurrentFence uint64 `protobuf:"varint,2,opt,name=current_fence,json=currentFence,proto3" json:"current_fence,omitempty"`
}

func (x *CheckFenceResponse) Reset() {
	*x = CheckFenceResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[13]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *CheckFenceResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*CheckFenceResponse) ProtoMessage() {}

func (x *CheckFenceResponse) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[13]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use CheckFenceResponse.ProtoReflect.Descriptor instead.
func (*CheckFenceResponse) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{13}
}

func (x *CheckFenceResponse) GetCurrent() bool {
	if x != nil {
		return x.Current
	}
	return false
}

func (x *CheckFenceResponse) GetCurrentFence() uint64 {
	if x != nil {
		return x.CurrentFence
	}
	return 0
}

// Revoke's request: the lock whose lease an operator ends.
type RevokeRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lock name.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// The tenant whose lock `name` is: empty for the caller's own; `@root`
	// for the root namespace (as in DescribeRequest.tenant).
	Tenant string `protobuf:"bytes,2,opt,name=tenant,proto3" json:"tenant,omitempty"`
}

func (x *RevokeRequest) Reset() {
	*x = RevokeRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[14]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *RevokeRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*RevokeRequest) ProtoMessage() {}

func (x *RevokeRequest) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[14]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use RevokeRequest.ProtoReflect.Descriptor instead.
func (*RevokeRequest) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{14}
}

func (x *RevokeRequest) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *RevokeRequest) GetTenant() string {
	if x != nil {
		return x.Tenant
	}
	return ""
}

// Revoke's answer: which lease was ended.
type RevokeResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The fence of the revoked lease.
	Fence uint64 `protobuf:"varint,1,opt,name=fence,proto3" json:"fence,omitempty"`
}

func (x *RevokeResponse) Reset() {
	*x = RevokeResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[15]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *RevokeResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*RevokeResponse) ProtoMessage() {}

func (x *RevokeResponse) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[15]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use RevokeResponse.ProtoReflect.Descriptor instead.
func (*RevokeResponse) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{15}
}

func (x *RevokeResponse) GetFence() uint64 {
	if x != nil {
		return x.Fence
	}
	return 0
}

// One heartbeat on a KeepAlive stream: the leases to renew.
type KeepAliveRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// A number chosen by the client (e.g. a counter), echoed in the response,
	// to match each response with the heartbeat, and the send time, it answers.
	Seq uint64 `protobuf:"varint,1,opt,name=seq,proto3" json:"seq,omitempty"`
	// The leases to renew: every lease the client still holds and wants kept.
	// A lease left out is simply not renewed by this heartbeat.
	Leases []*LeaseRef `protobuf:"bytes,2,rep,name=leases,proto3" json:"leases,omitempty"`
	// The round trip of the last heartbeat of this stream that was answered,
	// as the client measured it: from sending the heartbeat to reading its
	// answer, in microseconds; 0 for none yet. The broker judges the stream's
	// TTLs against these (KeepAliveResponse.advice); a stream that reports
	// none is judged by the broker's own share of each round trip (the
	// store's renewal), which leaves the network out. A client that reports
	// wrong figures misleads only its own advice and ttl_auto.
	LastRoundTripUs uint64 `protobuf:"varint,3,opt,name=last_round_trip_us,json=lastRoundTripUs,proto3" json:"last_round_trip_us,omitempty"`
}

func (x *KeepAliveRequest) Reset() {
	*x = KeepAliveRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[16]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *KeepAliveRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*KeepAliveRequest) ProtoMessage() {}

func (x *KeepAliveRequest) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[16]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use KeepAliveRequest.ProtoReflect.Descriptor instead.
func (*KeepAliveRequest) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{16}
}

func (x *KeepAliveRequest) GetSeq() uint64 {
	if x != nil {
		return x.Seq
	}
	return 0
}

func (x *KeepAliveRequest) GetLeases() []*LeaseRef {
	if x != nil {
		return x.Leases
	}
	return nil
}

func (x *KeepAliveRequest) GetLastRoundTripUs() uint64 {
	if x != nil {
		return x.LastRoundTripUs
	}
	return 0
}

// A lease the client holds.
type LeaseRef struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lock name.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// The owner token from the grant.
	OwnerToken string `protobuf:"bytes,2,opt,name=owner_token,json=ownerToken,proto3" json:"owner_token,omitempty"`
	// The new TTL in milliseconds, from now; 0 keeps the lease's own TTL.
	TtlMs uint64 `protobuf:"varint,3,opt,name=ttl_ms,json=ttlMs,proto3" json:"ttl_ms,omitempty"`
	// Renew for the TTL the broker suggests for this stream
	// (TtlAdvice.suggested_ttl_ms: 10 times the p99 of its round trips, at
	// least --ttl-auto-floor, within the broker's bounds), so that the TTL
	// follows the latency measured; ttl_ms must be 0. The entry's
	// LeaseStatus carries the TTL applied.
	TtlAuto bool `protobuf:"varint,4,opt,name=ttl_auto,json=ttlAuto,proto3" json:"ttl_auto,omitempty"`
}

func (x *LeaseRef) Reset() {
	*x = LeaseRef{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[17]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *LeaseRef) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*LeaseRef) ProtoMessage() {}

func (x *LeaseRef) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[17]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use LeaseRef.ProtoReflect.Descriptor instead.
func (*LeaseRef) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{17}
}

func (x *LeaseRef) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *LeaseRef) GetOwnerToken() string {
	if x != nil {
		return x.OwnerToken
	}
	return ""
}

func (x *LeaseRef) GetTtlMs() uint64 {
	if x != nil {
		return x.TtlMs
	}
	return 0
}

func (x *LeaseRef) GetTtlAuto() bool {
	if x != nil {
		return x.TtlAuto
	}
	return false
}

// The answer to one heartbeat: what became of each of its leases.
type KeepAliveResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The `seq` of the heartbeat this answers.
	Seq uint64 `protobuf:"varint,1,opt,name=seq,proto3" json:"seq,omitempty"`
	// One entry per lease of the heartbeat, in the same order.
	Leases []*LeaseStatus `protobuf:"bytes,2,rep,name=leases,proto3" json:"leases,omitempty"`
	// Set when a lease this heartbeat renewed has a TTL under 10 times the
	// p99 of this stream's heartbeat round trips: a heartbeat as slow as the
	// slowest of the last 128 eats a tenth of that lease's life or more, and
	// one stall more loses it. Lengthen the TTL (or use ttl_auto). Absent
	// while fewer than 3 round trips are measured.
	Advice *TtlAdvice `protobuf:"bytes,3,opt,name=advice,proto3" json:"advice,omitempty"`
}

func (x *KeepAliveResponse) Reset() {
	*x = KeepAliveResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[18]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *KeepAliveResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*KeepAliveResponse) ProtoMessage() {}

func (x *KeepAliveResponse) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[18]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use KeepAliveResponse.ProtoReflect.Descriptor instead.
func (*KeepAliveResponse) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{18}
}

func (x *KeepAliveResponse) GetSeq() uint64 {
	if x != nil {
		return x.Seq
	}
	return 0
}

func (x *KeepAliveResponse) GetLeases() []*LeaseStatus {
	if x != nil {
		return x.Leases
	}
	return nil
}

func (x *KeepAliveResponse) GetAdvice() *TtlAdvice {
	if x != nil {
		return x.Advice
	}
	return nil
}

// The broker's advice on a stream's TTLs, from the round trips it measured.
type TtlAdvice struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The 99th percentile of the stream's last 128 heartbeat round trips, in
	// microseconds (the largest but one of 128; with fewer, the largest).
	RoundTripP99Us uint64 `protobuf:"varint,1,opt,name=round_trip_p99_us,json=roundTripP99Us,proto3" json:"round_trip_p99_us,omitempty"`
	// The shortest TTL this heartbeat renewed, in milliseconds.
	ShortestTtlMs uint64 `protobuf:"varint,2,opt,name=shortest_ttl_ms,json=shortestTtlMs,proto3" json:"shortest_ttl_ms,omitempty"`
	// A TTL fit for the measured latency, in milliseconds: 10 times the p99,
	// at least --ttl-auto-floor, within the broker's bounds. What ttl_auto
	// gives.
	SuggestedTtlMs uint64 `protobuf:"varint,3,opt,name=suggested_ttl_ms,json=suggestedTtlMs,proto3" json:"suggested_ttl_ms,omitempty"`
	// How many leases of this heartbeat have a TTL under 10 times the p99.
	LeasesBelow uint32 `protobuf:"varint,4,opt,name=leases_below,json=leasesBelow,proto3" json:"leases_below,omitempty"`
	// A sentence for people and logs.
	Message string `protobuf:"bytes,5,opt,name=message,proto3" json:"message,omitempty"`
}

func (x *TtlAdvice) Reset() {
	*x = TtlAdvice{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[19]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *TtlAdvice) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*TtlAdvice) ProtoMessage() {}

func (x *TtlAdvice) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[19]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use TtlAdvice.ProtoReflect.Descriptor instead.
func (*TtlAdvice) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{19}
}

func (x *TtlAdvice) GetRoundTripP99Us() uint64 {
	if x != nil {
		return x.RoundTripP99Us
	}
	return 0
}

func (x *TtlAdvice) GetShortestTtlMs() uint64 {
	if x != nil {
		return x.ShortestTtlMs
	}
	return 0
}

func (x *TtlAdvice) GetSuggestedTtlMs() uint64 {
	if x != nil {
		return x.SuggestedTtlMs
	}
	return 0
}

func (x *TtlAdvice) GetLeasesBelow() uint32 {
	if x != nil {
		return x.LeasesBelow
	}
	return 0
}

func (x *TtlAdvice) GetMessage() string {
	if x != nil {
		return x.Message
	}
	return ""
}

// What became of one lease in a heartbeat.
type LeaseStatus struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lock name.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// What became of the lease.
	State LeaseStatus_State `protobuf:"varint,2,opt,name=state,proto3,enum=leasehold.v1.LeaseStatus_State" json:"state,omitempty"`
	// STATE_ALIVE: the TTL applied, in milliseconds.
	TtlMs uint64 `protobuf:"varint,3,opt,name=ttl_ms,json=ttlMs,proto3" json:"ttl_ms,omitempty"`
	// STATE_ALIVE: the lease's fence. STATE_LOST with LOSS_REASON_NOT_OWNER:
	// the current holder's fence.
	Fence uint64 `protobuf:"varint,4,opt,name=fence,proto3" json:"fence,omitempty"`
	// STATE_LOST: why.
	Reason LossReason `protobuf:"varint,5,opt,name=reason,proto3,enum=leasehold.v1.LossReason" json:"reason,omitempty"`
	// STATE_LOST, STATE_UNCONFIRMED, STATE_REJECTED: a sentence for people and
	// logs.
	Message string `protobuf:"bytes,6,opt,name=message,proto3" json:"message,omitempty"`
}

func (x *LeaseStatus) Reset() {
	*x = LeaseStatus{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[20]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *LeaseStatus) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*LeaseStatus) ProtoMessage() {}

func (x *LeaseStatus) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[20]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use LeaseStatus.ProtoReflect.Descriptor instead.
func (*LeaseStatus) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{20}
}

func (x *LeaseStatus) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *LeaseStatus) GetState() LeaseStatus_State {
	if x != nil {
		return x.State
	}
	return LeaseStatus_STATE_UNSPECIFIED
}

func (x *LeaseStatus) GetTtlMs() uint64 {
	if x != nil {
		return x.TtlMs
	}
	return 0
}

func (x *LeaseStatus) GetFence() uint64 {
	if x != nil {
		return x.Fence
	}
	return 0
}

func (x *LeaseStatus) GetReason() LossReason {
	if x != nil {
		return x.Reason
	}
	return LossReason_LOSS_REASON_UNSPECIFIED
}

func (x *LeaseStatus) GetMessage() string {
	if x != nil {
		return x.Message
	}
	return ""
}

// One request on a Session stream.
type SessionRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// Chosen by the client, unique among its requests in flight on this
	// stream (a counter does); the answer carries it back.
	Id uint64 `protobuf:"varint,1,opt,name=id,proto3" json:"id,omitempty"`
	// How long the broker may work on this request, in milliseconds; 0 for
	// no bound but the request's own (an Acquire's wait_timeout_ms). Past it
	// the request is answered DEADLINE_EXCEEDED and ended.
	TimeoutMs uint64 `protobuf:"varint,2,opt,name=timeout_ms,json=timeoutMs,proto3" json:"timeout_ms,omitempty"`
	// The request.
	//
	// Types that are assignable to Request:
	//
	//	*SessionRequest_Acquire
	//	*SessionRequest_Renew
	//	*SessionRequest_Release
	//	*SessionRequest_Heartbeat
	//	*SessionRequest_Cancel
	Request isSessionRequest_Request `protobuf_oneof:"request"`
}

func (x *SessionRequest) Reset() {
	*x = SessionRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[21]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *SessionRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*SessionRequest) ProtoMessage() {}

func (x *SessionRequest) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[21]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use SessionRequest.ProtoReflect.Descriptor instead.
func (*SessionRequest) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{21}
}

func (x *SessionRequest) GetId() uint64 {
	if x != nil {
		return x.Id
	}
	return 0
}

func (x *SessionRequest) GetTimeoutMs() uint64 {
	if x != nil {
		return x.TimeoutMs
	}
	return 0
}

func (m *SessionRequest) GetRequest() isSessionRequest_Request {
	if m != nil {
		return m.Request
	}
	return nil
}

func (x *SessionRequest) GetAcquire() *AcquireRequest {
	if x, ok := x.GetRequest().(*SessionRequest_Acquire); ok {
		return x.Acquire
	}
	return nil
}

func (x *SessionRequest) GetRenew() *RenewRequest {
	if x, ok := x.GetRequest().(*SessionRequest_Renew); ok {
		return x.Renew
	}
	return nil
}

func (x *SessionRequest) GetRelease() *ReleaseRequest {
	if x, ok := x.GetRequest().(*SessionRequest_Release); ok {
		return x.Release
	}
	return nil
}

func (x *SessionRequest) GetHeartbeat() *KeepAliveRequest {
	if x, ok := x.GetRequest().(*SessionRequest_Heartbeat); ok {
		return x.Heartbeat
	}
	return nil
}

func (x *SessionRequest) GetCancel() *SessionCancel {
	if x, ok := x.GetRequest().(*SessionRequest_Cancel); ok {
		return x.Cancel
	}
	return nil
}

type isSessionRequest_Request interface {
	isSessionRequest_Request()
}

type SessionRequest_Acquire struct {
	// Takes a lease, as the Acquire call.
	Acquire *AcquireRequest `protobuf:"bytes,3,opt,name=acquire,proto3,oneof"`
}

type SessionRequest_Renew struct {
	// Extends a lease, as the Renew call.
	Renew *RenewRequest `protobuf:"bytes,4,opt,name=renew,proto3,oneof"`
}

type SessionRequest_Release struct {
	// Ends a lease, as the Release call.
	Release *ReleaseRequest `protobuf:"bytes,5,opt,name=release,proto3,oneof"`
}

type SessionRequest_Heartbeat struct {
	// Renews the leases it names, as a heartbeat on KeepAlive.
	Heartbeat *KeepAliveRequest `protobuf:"bytes,6,opt,name=heartbeat,proto3,oneof"`
}

type SessionRequest_Cancel struct {
	// Ends the request in flight whose id it names; answered by that
	// request's answer (CANCELLED), not by one of its own.
	Cancel *SessionCancel `protobuf:"bytes,7,opt,name=cancel,proto3,oneof"`
}

func (*SessionRequest_Acquire) isSessionRequest_Request() {}

func (*SessionRequest_Renew) isSessionRequest_Request() {}

func (*SessionRequest_Release) isSessionRequest_Request() {}

func (*SessionRequest_Heartbeat) isSessionRequest_Request() {}

func (*SessionRequest_Cancel) isSessionRequest_Request() {}

// Which request a `cancel` ends.
type SessionCancel struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The id of the request in flight to end. An id not in flight (answered
	// already, or never sent) is ignored.
	Id uint64 `protobuf:"varint,1,opt,name=id,proto3" json:"id,omitempty"`
}

func (x *SessionCancel) Reset() {
	*x = SessionCancel{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[22]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *SessionCancel) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*SessionCancel) ProtoMessage() {}

func (x *SessionCancel) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[22]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use SessionCancel.ProtoReflect.Descriptor instead.
func (*SessionCancel) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{22}
}

func (x *SessionCancel) GetId() uint64 {
	if x != nil {
		return x.Id
	}
	return 0
}

// One answer on a Session stream.
type SessionResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The id of the request this answers.
	Id uint64 `protobuf:"varint,1,opt,name=id,proto3" json:"id,omitempty"`
	// The answer.
	//
	// Types that are assignable to Response:
	//
	//	*SessionResponse_Acquire
	//	*SessionResponse_Renew
	//	*SessionResponse_Release
	//	*SessionResponse_Heartbeat
	//	*SessionResponse_Error
	Response isSessionResponse_Response `protobuf_oneof:"response"`
}

func (x *SessionResponse) Reset() {
	*x = SessionResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[23]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *SessionResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*SessionResponse) ProtoMessage() {}

func (x *SessionResponse) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[23]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use SessionResponse.ProtoReflect.Descriptor instead.
func (*SessionResponse) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{23}
}

func (x *SessionResponse) GetId() uint64 {
	if x != nil {
		return x.Id
	}
	return 0
}

func (m *SessionResponse) GetResponse() isSessionResponse_Response {
	if m != nil {
		return m.Response
	}
	return nil
}

func (x *SessionResponse) GetAcquire() *AcquireResponse {
	if x, ok := x.GetResponse().(*SessionResponse_Acquire); ok {
		return x.Acquire
	}
	return nil
}

func (x *SessionResponse) GetRenew() *RenewResponse {
	if x, ok := x.GetResponse().(*SessionResponse_Renew); ok {
		return x.Renew
	}
	return nil
}

func (x *SessionResponse) GetRelease() *ReleaseResponse {
	if x, ok := x.GetResponse().(*SessionResponse_Release); ok {
		return x.Release
	}
	return nil
}

func (x *SessionResponse) GetHeartbeat() *KeepAliveResponse {
	if x, ok := x.GetResponse().(*SessionResponse_Heartbeat); ok {
		return x.Heartbeat
	}
	return nil
}

func (x *SessionResponse) GetError() *SessionError {
	if x, ok := x.GetResponse().(*SessionResponse_Error); ok {
		return x.Error
	}
	return nil
}

type isSessionResponse_Response interface {
	isSessionResponse_Response()
}

type SessionResponse_Acquire struct {
	// The Acquire was granted.
	Acquire *AcquireResponse `protobuf:"bytes,2,opt,name=acquire,proto3,oneof"`
}

type SessionResponse_Renew struct {
	// The Renew was applied.
	Renew *RenewResponse `protobuf:"bytes,3,opt,name=renew,proto3,oneof"`
}

type SessionResponse_Release struct {
	// The Release was applied.
	Release *ReleaseResponse `protobuf:"bytes,4,opt,name=release,proto3,oneof"`
}

type SessionResponse_Heartbeat struct {
	// What became of each lease of the heartbeat.
	Heartbeat *KeepAliveResponse `protobuf:"bytes,5,opt,name=heartbeat,proto3,oneof"`
}

type SessionResponse_Error struct {
	// The request failed: what the unary call would have failed with.
	Error *SessionError `protobuf:"bytes,6,opt,name=error,proto3,oneof"`
}

func (*SessionResponse_Acquire) isSessionResponse_Response() {}

func (*SessionResponse_Renew) isSessionResponse_Response() {}

func (*SessionResponse_Release) isSessionResponse_Response() {}

func (*SessionResponse_Heartbeat) isSessionResponse_Response() {}

func (*SessionResponse_Error) isSessionResponse_Response() {}

// A request that failed on a Session stream: the status the unary call
// would have ended with.
type SessionError struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The gRPC status code (google.rpc.Code: 10 ABORTED, 5 NOT_FOUND...), with
	// the same meaning as for the unary call (see "Errors" above).
	Code int32 `protobuf:"varint,1,opt,name=code,proto3" json:"code,omitempty"`
	// A sentence for people, as the unary call's status message.
	Message string `protobuf:"bytes,2,opt,name=message,proto3" json:"message,omitempty"`
	// An Acquire with keep_place that ended without the lock: its kept
	// place, as the unary call's `leasehold-place` metadata; else empty. A
	// secret like an owner token.
	Place string `protobuf:"bytes,3,opt,name=place,proto3" json:"place,omitempty"`
	// What a program reads of the failure, as the unary call's
	// google.rpc.ErrorInfo carries it (see "Errors" above): its reason code,
	Reason string `protobuf:"bytes,4,opt,name=reason,proto3" json:"reason,omitempty"`
	// and its facts (durations in milliseconds).
	Metadata map[string]string `protobuf:"bytes,5,rep,name=metadata,proto3" json:"metadata,omitempty" protobuf_key:"bytes,1,opt,name=key,proto3" protobuf_val:"bytes,2,opt,name=value,proto3"`
	// As the unary call's google.rpc.RetryInfo: how long to wait before a
	// retry may succeed; 0 when the broker does not say.
	RetryDelayMs uint64 `protobuf:"varint,6,opt,name=retry_delay_ms,json=retryDelayMs,proto3" json:"retry_delay_ms,omitempty"`
}

func (x *SessionError) Reset() {
	*x = SessionError{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[24]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *SessionError) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*SessionError) ProtoMessage() {}

func (x *SessionError) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[24]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use SessionError.ProtoReflect.Descriptor instead.
func (*SessionError) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{24}
}

func (x *SessionError) GetCode() int32 {
	if x != nil {
		return x.Code
	}
	return 0
}

func (x *SessionError) GetMessage() string {
	if x != nil {
		return x.Message
	}
	return ""
}

func (x *SessionError) GetPlace() string {
	if x != nil {
		return x.Place
	}
	return ""
}

func (x *SessionError) GetReason() string {
	if x != nil {
		return x.Reason
	}
	return ""
}

func (x *SessionError) GetMetadata() map[string]string {
	if x != nil {
		return x.Metadata
	}
	return nil
}

func (x *SessionError) GetRetryDelayMs() uint64 {
	if x != nil {
		return x.RetryDelayMs
	}
	return 0
}

// Campaign's request: the election to win and the leader's value.
type CampaignRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The election: a lock name (same rules and namespace as locks).
	Election string `protobuf:"bytes,1,opt,name=election,proto3" json:"election,omitempty"`
	// The leader's value, shown to everyone by Leader and Observe: an
	// address, an id. At most 256 bytes of printable characters.
	Value string `protobuf:"bytes,2,opt,name=value,proto3" json:"value,omitempty"`
	// Leadership lease TTL in milliseconds; 0 for the broker's default.
	TtlMs uint64 `protobuf:"varint,3,opt,name=ttl_ms,json=ttlMs,proto3" json:"ttl_ms,omitempty"`
	// How long to wait to become leader; 0 to try once.
	WaitTimeoutMs uint64 `protobuf:"varint,4,opt,name=wait_timeout_ms,json=waitTimeoutMs,proto3" json:"wait_timeout_ms,omitempty"`
	// Keep the campaign's place in line when the wait runs out, as
	// AcquireRequest.keep_place (a candidate that campaigns for longer than
	// the broker's maximum wait keeps its turn).
	KeepPlace bool `protobuf:"varint,5,opt,name=keep_place,json=keepPlace,proto3" json:"keep_place,omitempty"`
	// A place kept by an earlier Campaign, to wait in: as
	// AcquireRequest.place (a secret like an owner token).
	Place string `protobuf:"bytes,6,opt,name=place,proto3" json:"place,omitempty"`
}

func (x *CampaignRequest) Reset() {
	*x = CampaignRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[25]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *CampaignRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*CampaignRequest) ProtoMessage() {}

func (x *CampaignRequest) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[25]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use CampaignRequest.ProtoReflect.Descriptor instead.
func (*CampaignRequest) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{25}
}

func (x *CampaignRequest) GetElection() string {
	if x != nil {
		return x.Election
	}
	return ""
}

func (x *CampaignRequest) GetValue() string {
	if x != nil {
		return x.Value
	}
	return ""
}

func (x *CampaignRequest) GetTtlMs() uint64 {
	if x != nil {
		return x.TtlMs
	}
	return 0
}

func (x *CampaignRequest) GetWaitTimeoutMs() uint64 {
	if x != nil {
		return x.WaitTimeoutMs
	}
	return 0
}

func (x *CampaignRequest) GetKeepPlace() bool {
	if x != nil {
		return x.KeepPlace
	}
	return false
}

func (x *CampaignRequest) GetPlace() string {
	if x != nil {
		return x.Place
	}
	return ""
}

// Campaign's answer: the leadership lease.
type CampaignResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The leadership lease; `lease.fence` is the leader's term.
	Lease *Lease `protobuf:"bytes,1,opt,name=lease,proto3" json:"lease,omitempty"`
	// Milliseconds waited (see AcquireResponse.waited_ms).
	WaitedMs uint64 `protobuf:"varint,2,opt,name=waited_ms,json=waitedMs,proto3" json:"waited_ms,omitempty"`
}

func (x *CampaignResponse) Reset() {
	*x = CampaignResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[26]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *CampaignResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*CampaignResponse) ProtoMessage() {}

func (x *CampaignResponse) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[26]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use CampaignResponse.ProtoReflect.Descriptor instead.
func (*CampaignResponse) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{26}
}

func (x *CampaignResponse) GetLease() *Lease {
	if x != nil {
		return x.Lease
	}
	return nil
}

func (x *CampaignResponse) GetWaitedMs() uint64 {
	if x != nil {
		return x.WaitedMs
	}
	return 0
}

// Leader's request: the election to look at.
type LeaderRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The election.
	Election string `protobuf:"bytes,1,opt,name=election,proto3" json:"election,omitempty"`
}

func (x *LeaderRequest) Reset() {
	*x = LeaderRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[27]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *LeaderRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*LeaderRequest) ProtoMessage() {}

func (x *LeaderRequest) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[27]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use LeaderRequest.ProtoReflect.Descriptor instead.
func (*LeaderRequest) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{27}
}

func (x *LeaderRequest) GetElection() string {
	if x != nil {
		return x.Election
	}
	return ""
}

// Leader's answer: the election's leader now, if any.
type LeaderResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// Whether the election has a leader now.
	Present bool `protobuf:"varint,1,opt,name=present,proto3" json:"present,omitempty"`
	// The leader's value.
	Value string `protobuf:"bytes,2,opt,name=value,proto3" json:"value,omitempty"`
	// The leader's term (its lease's fence).
	Term uint64 `protobuf:"varint,3,opt,name=term,proto3" json:"term,omitempty"`
	// Time left on the leader's lease unless renewed, in milliseconds.
	RemainingMs uint64 `protobuf:"varint,4,opt,name=remaining_ms,json=remainingMs,proto3" json:"remaining_ms,omitempty"`
}

func (x *LeaderResponse) Reset() {
	*x = LeaderResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[28]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *LeaderResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*LeaderResponse) ProtoMessage() {}

func (x *LeaderResponse) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[28]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use LeaderResponse.ProtoReflect.Descriptor instead.
func (*LeaderResponse) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{28}
}

func (x *LeaderResponse) GetPresent() bool {
	if x != nil {
		return x.Present
	}
	return false
}

func (x *LeaderResponse) GetValue() string {
	if x != nil {
		return x.Value
	}
	return ""
}

func (x *LeaderResponse) GetTerm() uint64 {
	if x != nil {
		return x.Term
	}
	return 0
}

func (x *LeaderResponse) GetRemainingMs() uint64 {
	if x != nil {
		return x.RemainingMs
	}
	return 0
}

// Observe's request: the election to watch.
type ObserveRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The election.
	Election string `protobuf:"bytes,1,opt,name=election,proto3" json:"election,omitempty"`
}

func (x *ObserveRequest) Reset() {
	*x = ObserveRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[29]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *ObserveRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ObserveRequest) ProtoMessage() {}

func (x *ObserveRequest) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[29]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ObserveRequest.ProtoReflect.Descriptor instead.
func (*ObserveRequest) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{29}
}

func (x *ObserveRequest) GetElection() string {
	if x != nil {
		return x.Election
	}
	return ""
}

// One observation on an Observe stream: the leadership as it is now (the
// first message) or as it just changed. The same fields as LeaderResponse.
type ObserveResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// Whether the election has a leader now.
	Present bool `protobuf:"varint,1,opt,name=present,proto3" json:"present,omitempty"`
	// The leader's value.
	Value string `protobuf:"bytes,2,opt,name=value,proto3" json:"value,omitempty"`
	// The leader's term (its lease's fence).
	Term uint64 `protobuf:"varint,3,opt,name=term,proto3" json:"term,omitempty"`
	// Time left on the leader's lease unless renewed, in milliseconds.
	RemainingMs uint64 `protobuf:"varint,4,opt,name=remaining_ms,json=remainingMs,proto3" json:"remaining_ms,omitempty"`
}

func (x *ObserveResponse) Reset() {
	*x = ObserveResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[30]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *ObserveResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ObserveResponse) ProtoMessage() {}

func (x *ObserveResponse) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[30]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ObserveResponse.ProtoReflect.Descriptor instead.
func (*ObserveResponse) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{30}
}

func (x *ObserveResponse) GetPresent() bool {
	if x != nil {
		return x.Present
	}
	return false
}

func (x *ObserveResponse) GetValue() string {
	if x != nil {
		return x.Value
	}
	return ""
}

func (x *ObserveResponse) GetTerm() uint64 {
	if x != nil {
		return x.Term
	}
	return 0
}

func (x *ObserveResponse) GetRemainingMs() uint64 {
	if x != nil {
		return x.RemainingMs
	}
	return 0
}

// Resign's request: the leadership to give up.
type ResignRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The election.
	Election string `protobuf:"bytes,1,opt,name=election,proto3" json:"election,omitempty"`
	// The owner token of the leadership lease.
	OwnerToken string `protobuf:"bytes,2,opt,name=owner_token,json=ownerToken,proto3" json:"owner_token,omitempty"`
}

func (x *ResignRequest) Reset() {
	*x = ResignRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[31]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *ResignRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ResignRequest) ProtoMessage() {}

func (x *ResignRequest) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[31]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ResignRequest.ProtoReflect.Descriptor instead.
func (*ResignRequest) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{31}
}

func (x *ResignRequest) GetElection() string {
	if x != nil {
		return x.Election
	}
	return ""
}

func (x *ResignRequest) GetOwnerToken() string {
	if x != nil {
		return x.OwnerToken
	}
	return ""
}

// Resign's answer: empty; success is the answer.
type ResignResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields
}

func (x *ResignResponse) Reset() {
	*x = ResignResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_leasehold_v1_leasehold_proto_msgTypes[32]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *ResignResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ResignResponse) ProtoMessage() {}

func (x *ResignResponse) ProtoReflect() protoreflect.Message {
	mi := &file_leasehold_v1_leasehold_proto_msgTypes[32]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ResignResponse.ProtoReflect.Descriptor instead.
func (*ResignResponse) Descriptor() ([]byte, []int) {
	return file_leasehold_v1_leasehold_proto_rawDescGZIP(), []int{32}
}

var File_leasehold_v1_leasehold_proto protoreflect.FileDescriptor

var file_leasehold_v1_leasehold_proto_rawDesc = []byte{
	0x0a, 0x1c, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2f, 0x76, 0x31, 0x2f, 0x6c,
	0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x70, 0x72, 0x6f, 0x74, 0x6f, 0x12, 0x0c,
	0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x22, 0x69, 0x0a, 0x05,
	0x4c, 0x65, 0x61, 0x73, 0x65, 0x12, 0x12, 0x0a, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x18, 0x01, 0x20,
	0x01, 0x28, 0x09, 0x52, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x12, 0x1f, 0x0a, 0x0b, 0x6f, 0x77, 0x6e,
	0x65, 0x72, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09, 0x52, 0x0a,
	0x6f, 0x77, 0x6e, 0x65, 0x72, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x12, 0x14, 0x0a, 0x05, 0x66, 0x65,
	0x6e, 0x63, 0x65, 0x18, 0x03, 0x20, 0x01, 0x28, 0x04, 0x52, 0x05, 0x66, 0x65, 0x6e, 0x63, 0x65,
	0x12, 0x15, 0x0a, 0x06, 0x74, 0x74, 0x6c, 0x5f, 0x6d, 0x73, 0x18, 0x04, 0x20, 0x01, 0x28, 0x04,
	0x52, 0x05, 0x74, 0x74, 0x6c, 0x4d, 0x73, 0x22, 0x85, 0x02, 0x0a, 0x0e, 0x41, 0x63, 0x71, 0x75,
	0x69, 0x72, 0x65, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x12, 0x12, 0x0a, 0x04, 0x6e, 0x61,
	0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x12, 0x15,
	0x0a, 0x06, 0x74, 0x74, 0x6c, 0x5f, 0x6d, 0x73, 0x18, 0x02, 0x20, 0x01, 0x28, 0x04, 0x52, 0x05,
	0x74, 0x74, 0x6c, 0x4d, 0x73, 0x12, 0x16, 0x0a, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x18,
	0x03, 0x20, 0x01, 0x28, 0x09, 0x52, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x12, 0x26, 0x0a,
	0x0f, 0x77, 0x61, 0x69, 0x74, 0x5f, 0x74, 0x69, 0x6d, 0x65, 0x6f, 0x75, 0x74, 0x5f, 0x6d, 0x73,
	0x18, 0x04, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0d, 0x77, 0x61, 0x69, 0x74, 0x54, 0x69, 0x6d, 0x65,
	0x6f, 0x75, 0x74, 0x4d, 0x73, 0x12, 0x22, 0x0a, 0x0d, 0x6c, 0x6f, 0x63, 0x6b, 0x5f, 0x64, 0x65,
	0x6c, 0x61, 0x79, 0x5f, 0x6d, 0x73, 0x18, 0x05, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0b, 0x6c, 0x6f,
	0x63, 0x6b, 0x44, 0x65, 0x6c, 0x61, 0x79, 0x4d, 0x73, 0x12, 0x14, 0x0a, 0x05, 0x6c, 0x69, 0x6d,
	0x69, 0x74, 0x18, 0x06, 0x20, 0x01, 0x28, 0x0d, 0x52, 0x05, 0x6c, 0x69, 0x6d, 0x69, 0x74, 0x12,
	0x1d, 0x0a, 0x0a, 0x6b, 0x65, 0x65, 0x70, 0x5f, 0x70, 0x6c, 0x61, 0x63, 0x65, 0x18, 0x07, 0x20,
	0x01, 0x28, 0x08, 0x52, 0x09, 0x6b, 0x65, 0x65, 0x70, 0x50, 0x6c, 0x61, 0x63, 0x65, 0x12, 0x14,
	0x0a, 0x05, 0x70, 0x6c, 0x61, 0x63, 0x65, 0x18, 0x08, 0x20, 0x01, 0x28, 0x09, 0x52, 0x05, 0x70,
	0x6c, 0x61, 0x63, 0x65, 0x12, 0x19, 0x0a, 0x08, 0x74, 0x74, 0x6c, 0x5f, 0x61, 0x75, 0x74, 0x6f,
	0x18, 0x09, 0x20, 0x01, 0x28, 0x08, 0x52, 0x07, 0x74, 0x74, 0x6c, 0x41, 0x75, 0x74, 0x6f, 0x22,
	0x59, 0x0a, 0x0f, 0x41, 0x63, 0x71, 0x75, 0x69, 0x72, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e,
	0x73, 0x65, 0x12, 0x29, 0x0a, 0x05, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28,
	0x0b, 0x32, 0x13, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31,
	0x2e, 0x4c, 0x65, 0x61, 0x73, 0x65, 0x52, 0x05, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x12, 0x1b, 0x0a,
	0x09, 0x77, 0x61, 0x69, 0x74, 0x65, 0x64, 0x5f, 0x6d, 0x73, 0x18, 0x02, 0x20, 0x01, 0x28, 0x04,
	0x52, 0x08, 0x77, 0x61, 0x69, 0x74, 0x65, 0x64, 0x4d, 0x73, 0x22, 0x75, 0x0a, 0x0c, 0x52, 0x65,
	0x6e, 0x65, 0x77, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x12, 0x12, 0x0a, 0x04, 0x6e, 0x61,
	0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x12, 0x1f,
	0x0a, 0x0b, 0x6f, 0x77, 0x6e, 0x65, 0x72, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x02, 0x20,
	0x01, 0x28, 0x09, 0x52, 0x0a, 0x6f, 0x77, 0x6e, 0x65, 0x72, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x12,
	0x15, 0x0a, 0x06, 0x74, 0x74, 0x6c, 0x5f, 0x6d, 0x73, 0x18, 0x03, 0x20, 0x01, 0x28, 0x04, 0x52,
	0x05, 0x74, 0x74, 0x6c, 0x4d, 0x73, 0x12, 0x19, 0x0a, 0x08, 0x74, 0x74, 0x6c, 0x5f, 0x61, 0x75,
	0x74, 0x6f, 0x18, 0x04, 0x20, 0x01, 0x28, 0x08, 0x52, 0x07, 0x74, 0x74, 0x6c, 0x41, 0x75, 0x74,
	0x6f, 0x22, 0x3c, 0x0a, 0x0d, 0x52, 0x65, 0x6e, 0x65, 0x77, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e,
	0x73, 0x65, 0x12, 0x15, 0x0a, 0x06, 0x74, 0x74, 0x6c, 0x5f, 0x6d, 0x73, 0x18, 0x01, 0x20, 0x01,
	0x28, 0x04, 0x52, 0x05, 0x74, 0x74, 0x6c, 0x4d, 0x73, 0x12, 0x14, 0x0a, 0x05, 0x66, 0x65, 0x6e,
	0x63, 0x65, 0x18, 0x02, 0x20, 0x01, 0x28, 0x04, 0x52, 0x05, 0x66, 0x65, 0x6e, 0x63, 0x65, 0x22,
	0x45, 0x0a, 0x0e, 0x52, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73,
	0x74, 0x12, 0x12, 0x0a, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52,
	0x04, 0x6e, 0x61, 0x6d, 0x65, 0x12, 0x1f, 0x0a, 0x0b, 0x6f, 0x77, 0x6e, 0x65, 0x72, 0x5f, 0x74,
	0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09, 0x52, 0x0a, 0x6f, 0x77, 0x6e, 0x65,
	0x72, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x22, 0x11, 0x0a, 0x0f, 0x52, 0x65, 0x6c, 0x65, 0x61, 0x73,
	0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x22, 0x3d, 0x0a, 0x0f, 0x44, 0x65, 0x73,
	0x63, 0x72, 0x69, 0x62, 0x65, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x12, 0x12, 0x0a, 0x04,
	0x6e, 0x61, 0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x04, 0x6e, 0x61, 0x6d, 0x65,
	0x12, 0x16, 0x0a, 0x06, 0x74, 0x65, 0x6e, 0x61, 0x6e, 0x74, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09,
	0x52, 0x06, 0x74, 0x65, 0x6e, 0x61, 0x6e, 0x74, 0x22, 0xf8, 0x02, 0x0a, 0x10, 0x44, 0x65, 0x73,
	0x63, 0x72, 0x69, 0x62, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x12, 0x12, 0x0a,
	0x04, 0x68, 0x65, 0x6c, 0x64, 0x18, 0x01, 0x20, 0x01, 0x28, 0x08, 0x52, 0x04, 0x68, 0x65, 0x6c,
	0x64, 0x12, 0x16, 0x0a, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x18, 0x02, 0x20, 0x01, 0x28,
	0x09, 0x52, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x12, 0x14, 0x0a, 0x05, 0x66, 0x65, 0x6e,
	0x63, 0x65, 0x18, 0x03, 0x20, 0x01, 0x28, 0x04, 0x52, 0x05, 0x66, 0x65, 0x6e, 0x63, 0x65, 0x12,
	0x21, 0x0a, 0x0c, 0x72, 0x65, 0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67, 0x5f, 0x6d, 0x73, 0x18,
	0x04, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0b, 0x72, 0x65, 0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67,
	0x4d, 0x73, 0x12, 0x15, 0x0a, 0x06, 0x74, 0x74, 0x6c, 0x5f, 0x6d, 0x73, 0x18, 0x05, 0x20, 0x01,
	0x28, 0x04, 0x52, 0x05, 0x74, 0x74, 0x6c, 0x4d, 0x73, 0x12, 0x2b, 0x0a, 0x12, 0x67, 0x72, 0x61,
	0x6e, 0x74, 0x65, 0x64, 0x5f, 0x61, 0x74, 0x5f, 0x75, 0x6e, 0x69, 0x78, 0x5f, 0x6d, 0x73, 0x18,
	0x06, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0f, 0x67, 0x72, 0x61, 0x6e, 0x74, 0x65, 0x64, 0x41, 0x74,
	0x55, 0x6e, 0x69, 0x78, 0x4d, 0x73, 0x12, 0x23, 0x0a, 0x0d, 0x6c, 0x6f, 0x63, 0x61, 0x6c, 0x5f,
	0x77, 0x61, 0x69, 0x74, 0x65, 0x72, 0x73, 0x18, 0x07, 0x20, 0x01, 0x28, 0x0d, 0x52, 0x0c, 0x6c,
	0x6f, 0x63, 0x61, 0x6c, 0x57, 0x61, 0x69, 0x74, 0x65, 0x72, 0x73, 0x12, 0x22, 0x0a, 0x0d, 0x6c,
	0x6f, 0x63, 0x6b, 0x5f, 0x64, 0x65, 0x6c, 0x61, 0x79, 0x5f, 0x6d, 0x73, 0x18, 0x08, 0x20, 0x01,
	0x28, 0x04, 0x52, 0x0b, 0x6c, 0x6f, 0x63, 0x6b, 0x44, 0x65, 0x6c, 0x61, 0x79, 0x4d, 0x73, 0x12,
	0x35, 0x0a, 0x17, 0x6c, 0x6f, 0x63, 0x6b, 0x5f, 0x64, 0x65, 0x6c, 0x61, 0x79, 0x5f, 0x72, 0x65,
	0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67, 0x5f, 0x6d, 0x73, 0x18, 0x09, 0x20, 0x01, 0x28, 0x04,
	0x52, 0x14, 0x6c, 0x6f, 0x63, 0x6b, 0x44, 0x65, 0x6c, 0x61, 0x79, 0x52, 0x65, 0x6d, 0x61, 0x69,
	0x6e, 0x69, 0x6e, 0x67, 0x4d, 0x73, 0x12, 0x18, 0x0a, 0x07, 0x77, 0x61, 0x69, 0x74, 0x65, 0x72,
	0x73, 0x18, 0x0a, 0x20, 0x01, 0x28, 0x04, 0x52, 0x07, 0x77, 0x61, 0x69, 0x74, 0x65, 0x72, 0x73,
	0x12, 0x21, 0x0a, 0x0c, 0x70, 0x65, 0x72, 0x6d, 0x69, 0x74, 0x73, 0x5f, 0x68, 0x65, 0x6c, 0x64,
	0x18, 0x0b, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0b, 0x70, 0x65, 0x72, 0x6d, 0x69, 0x74, 0x73, 0x48,
	0x65, 0x6c, 0x64, 0x22, 0x79, 0x0a, 0x0b, 0x4c, 0x69, 0x73, 0x74, 0x52, 0x65, 0x71, 0x75, 0x65,
	0x73, 0x74, 0x12, 0x16, 0x0a, 0x06, 0x70, 0x72, 0x65, 0x66, 0x69, 0x78, 0x18, 0x01, 0x20, 0x01,
	0x28, 0x09, 0x52, 0x06, 0x70, 0x72, 0x65, 0x66, 0x69, 0x78, 0x12, 0x16, 0x0a, 0x06, 0x74, 0x65,
	0x6e, 0x61, 0x6e, 0x74, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09, 0x52, 0x06, 0x74, 0x65, 0x6e, 0x61,
	0x6e, 0x74, 0x12, 0x1b, 0x0a, 0x09, 0x70, 0x61, 0x67, 0x65, 0x5f, 0x73, 0x69, 0x7a, 0x65, 0x18,
	0x03, 0x20, 0x01, 0x28, 0x0d, 0x52, 0x08, 0x70, 0x61, 0x67, 0x65, 0x53, 0x69, 0x7a, 0x65, 0x12,
	0x1d, 0x0a, 0x0a, 0x70, 0x61, 0x67, 0x65, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x04, 0x20,
	0x01, 0x28, 0x09, 0x52, 0x09, 0x70, 0x61, 0x67, 0x65, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x22, 0x66,
	0x0a, 0x0c, 0x4c, 0x69, 0x73, 0x74, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x12, 0x2e,
	0x0a, 0x05, 0x6c, 0x6f, 0x63, 0x6b, 0x73, 0x18, 0x01, 0x20, 0x03, 0x28, 0x0b, 0x32, 0x18, 0x2e,
	0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x4c, 0x69, 0x73,
	0x74, 0x65, 0x64, 0x4c, 0x6f, 0x63, 0x6b, 0x52, 0x05, 0x6c, 0x6f, 0x63, 0x6b, 0x73, 0x12, 0x26,
	0x0a, 0x0f, 0x6e, 0x65, 0x78, 0x74, 0x5f, 0x70, 0x61, 0x67, 0x65, 0x5f, 0x74, 0x6f, 0x6b, 0x65,
	0x6e, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09, 0x52, 0x0d, 0x6e, 0x65, 0x78, 0x74, 0x50, 0x61, 0x67,
	0x65, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x22, 0xd5, 0x02, 0x0a, 0x0a, 0x4c, 0x69, 0x73, 0x74, 0x65,
	0x64, 0x4c, 0x6f, 0x63, 0x6b, 0x12, 0x12, 0x0a, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x18, 0x01, 0x20,
	0x01, 0x28, 0x09, 0x52, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x12, 0x16, 0x0a, 0x06, 0x74, 0x65, 0x6e,
	0x61, 0x6e, 0x74, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09, 0x52, 0x06, 0x74, 0x65, 0x6e, 0x61, 0x6e,
	0x74, 0x12, 0x12, 0x0a, 0x04, 0x68, 0x65, 0x6c, 0x64, 0x18, 0x03, 0x20, 0x01, 0x28, 0x08, 0x52,
	0x04, 0x68, 0x65, 0x6c, 0x64, 0x12, 0x16, 0x0a, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x18,
	0x04, 0x20, 0x01, 0x28, 0x09, 0x52, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x12, 0x14, 0x0a,
	0x05, 0x66, 0x65, 0x6e, 0x63, 0x65, 0x18, 0x05, 0x20, 0x01, 0x28, 0x04, 0x52, 0x05, 0x66, 0x65,
	0x6e, 0x63, 0x65, 0x12, 0x21, 0x0a, 0x0c, 0x72, 0x65, 0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67,
	0x5f, 0x6d, 0x73, 0x18, 0x06, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0b, 0x72, 0x65, 0x6d, 0x61, 0x69,
	0x6e, 0x69, 0x6e, 0x67, 0x4d, 0x73, 0x12, 0x15, 0x0a, 0x06, 0x74, 0x74, 0x6c, 0x5f, 0x6d, 0x73,
	0x18, 0x07, 0x20, 0x01, 0x28, 0x04, 0x52, 0x05, 0x74, 0x74, 0x6c, 0x4d, 0x73, 0x12, 0x2b, 0x0a,
	0x12, 0x67, 0x72, 0x61, 0x6e, 0x74, 0x65, 0x64, 0x5f, 0x61, 0x74, 0x5f, 0x75, 0x6e, 0x69, 0x78,
	0x5f, 0x6d, 0x73, 0x18, 0x08, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0f, 0x67, 0x72, 0x61, 0x6e, 0x74,
	0x65, 0x64, 0x41, 0x74, 0x55, 0x6e, 0x69, 0x78, 0x4d, 0x73, 0x12, 0x18, 0x0a, 0x07, 0x77, 0x61,
	0x69, 0x74, 0x65, 0x72, 0x73, 0x18, 0x09, 0x20, 0x01, 0x28, 0x04, 0x52, 0x07, 0x77, 0x61, 0x69,
	0x74, 0x65, 0x72, 0x73, 0x12, 0x21, 0x0a, 0x0c, 0x70, 0x65, 0x72, 0x6d, 0x69, 0x74, 0x73, 0x5f,
	0x68, 0x65, 0x6c, 0x64, 0x18, 0x0a, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0b, 0x70, 0x65, 0x72, 0x6d,
	0x69, 0x74, 0x73, 0x48, 0x65, 0x6c, 0x64, 0x12, 0x35, 0x0a, 0x17, 0x6c, 0x6f, 0x63, 0x6b, 0x5f,
	0x64, 0x65, 0x6c, 0x61, 0x79, 0x5f, 0x72, 0x65, 0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67, 0x5f,
	0x6d, 0x73, 0x18, 0x0b, 0x20, 0x01, 0x28, 0x04, 0x52, 0x14, 0x6c, 0x6f, 0x63, 0x6b, 0x44, 0x65,
	0x6c, 0x61, 0x79, 0x52, 0x65, 0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67, 0x4d, 0x73, 0x22, 0x3d,
	0x0a, 0x11, 0x43, 0x68, 0x65, 0x63, 0x6b, 0x46, 0x65, 0x6e, 0x63, 0x65, 0x52, 0x65, 0x71, 0x75,
	0x65, 0x73, 0x74, 0x12, 0x12, 0x0a, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28,
	0x09, 0x52, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x12, 0x14, 0x0a, 0x05, 0x66, 0x65, 0x6e, 0x63, 0x65,
	0x18, 0x02, 0x20, 0x01, 0x28, 0x04, 0x52, 0x05, 0x66, 0x65, 0x6e, 0x63, 0x65, 0x22, 0x53, 0x0a,
	0x12, 0x43, 0x68, 0x65, 0x63, 0x6b, 0x46, 0x65, 0x6e, 0x63, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f,
	0x6e, 0x73, 0x65, 0x12, 0x18, 0x0a, 0x07, 0x63, 0x75, 0x72, 0x72, 0x65, 0x6e, 0x74, 0x18, 0x01,
	0x20, 0x01, 0x28, 0x08, 0x52, 0x07, 0x63, 0x75, 0x72, 0x72, 0x65, 0x6e, 0x74, 0x12, 0x23, 0x0a,
	0x0d, 0x63, 0x75, 0x72, 0x72, 0x65, 0x6e, 0x74, 0x5f, 0x66, 0x65, 0x6e, 0x63, 0x65, 0x18, 0x02,
	0x20, 0x01, 0x28, 0x04, 0x52, 0x0c, 0x63, 0x75, 0x72, 0x72, 0x65, 0x6e, 0x74, 0x46, 0x65, 0x6e,
	0x63, 0x65, 0x22, 0x3b, 0x0a, 0x0d, 0x52, 0x65, 0x76, 0x6f, 0x6b, 0x65, 0x52, 0x65, 0x71, 0x75,
	0x65, 0x73, 0x74, 0x12, 0x12, 0x0a, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28,
	0x09, 0x52, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x12, 0x16, 0x0a, 0x06, 0x74, 0x65, 0x6e, 0x61, 0x6e,
	0x74, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09, 0x52, 0x06, 0x74, 0x65, 0x6e, 0x61, 0x6e, 0x74, 0x22,
	0x26, 0x0a, 0x0e, 0x52, 0x65, 0x76, 0x6f, 0x6b, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73,
	0x65, 0x12, 0x14, 0x0a, 0x05, 0x66, 0x65, 0x6e, 0x63, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28, 0x04,
	0x52, 0x05, 0x66, 0x65, 0x6e, 0x63, 0x65, 0x22, 0x81, 0x01, 0x0a, 0x10, 0x4b, 0x65, 0x65, 0x70,
	0x41, 0x6c, 0x69, 0x76, 0x65, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x12, 0x10, 0x0a, 0x03,
	0x73, 0x65, 0x71, 0x18, 0x01, 0x20, 0x01, 0x28, 0x04, 0x52, 0x03, 0x73, 0x65, 0x71, 0x12, 0x2e,
	0x0a, 0x06, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x73, 0x18, 0x02, 0x20, 0x03, 0x28, 0x0b, 0x32, 0x16,
	0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x4c, 0x65,
	0x61, 0x73, 0x65, 0x52, 0x65, 0x66, 0x52, 0x06, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x73, 0x12, 0x2b,
	0x0a, 0x12, 0x6c, 0x61, 0x73, 0x74, 0x5f, 0x72, 0x6f, 0x75, 0x6e, 0x64, 0x5f, 0x74, 0x72, 0x69,
	0x70, 0x5f, 0x75, 0x73, 0x18, 0x03, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0f, 0x6c, 0x61, 0x73, 0x74,
	0x52, 0x6f, 0x75, 0x6e, 0x64, 0x54, 0x72, 0x69, 0x70, 0x55, 0x73, 0x22, 0x71, 0x0a, 0x08, 0x4c,
	0x65, 0x61, 0x73, 0x65, 0x52, 0x65, 0x66, 0x12, 0x12, 0x0a, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x18,
	0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x12, 0x1f, 0x0a, 0x0b, 0x6f,
	0x77, 0x6e, 0x65, 0x72, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09,
	0x52, 0x0a, 0x6f, 0x77, 0x6e, 0x65, 0x72, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x12, 0x15, 0x0a, 0x06,
	0x74, 0x74, 0x6c, 0x5f, 0x6d, 0x73, 0x18, 0x03, 0x20, 0x01, 0x28, 0x04, 0x52, 0x05, 0x74, 0x74,
	0x6c, 0x4d, 0x73, 0x12, 0x19, 0x0a, 0x08, 0x74, 0x74, 0x6c, 0x5f, 0x61, 0x75, 0x74, 0x6f, 0x18,
	0x04, 0x20, 0x01, 0x28, 0x08, 0x52, 0x07, 0x74, 0x74, 0x6c, 0x41, 0x75, 0x74, 0x6f, 0x22, 0x89,
	0x01, 0x0a, 0x11, 0x4b, 0x65, 0x65, 0x70, 0x41, 0x6c, 0x69, 0x76, 0x65, 0x52, 0x65, 0x73, 0x70,
	0x6f, 0x6e, 0x73, 0x65, 0x12, 0x10, 0x0a, 0x03, 0x73, 0x65, 0x71, 0x18, 0x01, 0x20, 0x01, 0x28,
	0x04, 0x52, 0x03, 0x73, 0x65, 0x71, 0x12, 0x31, 0x0a, 0x06, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x73,
	0x18, 0x02, 0x20, 0x03, 0x28, 0x0b, 0x32, 0x19, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f,
	0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x4c, 0x65, 0x61, 0x73, 0x65, 0x53, 0x74, 0x61, 0x74, 0x75,
	0x73, 0x52, 0x06, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x73, 0x12, 0x2f, 0x0a, 0x06, 0x61, 0x64, 0x76,
	0x69, 0x63, 0x65, 0x18, 0x03, 0x20, 0x01, 0x28, 0x0b, 0x32, 0x17, 0x2e, 0x6c, 0x65, 0x61, 0x73,
	0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x54, 0x74, 0x6c, 0x41, 0x64, 0x76, 0x69,
	0x63, 0x65, 0x52, 0x06, 0x61, 0x64, 0x76, 0x69, 0x63, 0x65, 0x22, 0xc5, 0x01, 0x0a, 0x09, 0x54,
	0x74, 0x6c, 0x41, 0x64, 0x76, 0x69, 0x63, 0x65, 0x12, 0x29, 0x0a, 0x11, 0x72, 0x6f, 0x75, 0x6e,
	0x64, 0x5f, 0x74, 0x72, 0x69, 0x70, 0x5f, 0x70, 0x39, 0x39, 0x5f, 0x75, 0x73, 0x18, 0x01, 0x20,
	0x01, 0x28, 0x04, 0x52, 0x0e, 0x72, 0x6f, 0x75, 0x6e, 0x64, 0x54, 0x72, 0x69, 0x70, 0x50, 0x39,
	0x39, 0x55, 0x73, 0x12, 0x26, 0x0a, 0x0f, 0x73, 0x68, 0x6f, 0x72, 0x74, 0x65, 0x73, 0x74, 0x5f,
	0x74, 0x74, 0x6c, 0x5f, 0x6d, 0x73, 0x18, 0x02, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0d, 0x73, 0x68,
	0x6f, 0x72, 0x74, 0x65, 0x73, 0x74, 0x54, 0x74, 0x6c, 0x4d, 0x73, 0x12, 0x28, 0x0a, 0x10, 0x73,
	0x75, 0x67, 0x67, 0x65, 0x73, 0x74, 0x65, 0x64, 0x5f, 0x74, 0x74, 0x6c, 0x5f, 0x6d, 0x73, 0x18,
	0x03, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0e, 0x73, 0x75, 0x67, 0x67, 0x65, 0x73, 0x74, 0x65, 0x64,
	0x54, 0x74, 0x6c, 0x4d, 0x73, 0x12, 0x21, 0x0a, 0x0c, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x73, 0x5f,
	0x62, 0x65, 0x6c, 0x6f, 0x77, 0x18, 0x04, 0x20, 0x01, 0x28, 0x0d, 0x52, 0x0b, 0x6c, 0x65, 0x61,
	0x73, 0x65, 0x73, 0x42, 0x65, 0x6c, 0x6f, 0x77, 0x12, 0x18, 0x0a, 0x07, 0x6d, 0x65, 0x73, 0x73,
	0x61, 0x67, 0x65, 0x18, 0x05, 0x20, 0x01, 0x28, 0x09, 0x52, 0x07, 0x6d, 0x65, 0x73, 0x73, 0x61,
	0x67, 0x65, 0x22, 0xbd, 0x02, 0x0a, 0x0b, 0x4c, 0x65, 0x61, 0x73, 0x65, 0x53, 0x74, 0x61, 0x74,
	0x75, 0x73, 0x12, 0x12, 0x0a, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09,
	0x52, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x12, 0x35, 0x0a, 0x05, 0x73, 0x74, 0x61, 0x74, 0x65, 0x18,
	0x02, 0x20, 0x01, 0x28, 0x0e, 0x32, 0x1f, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c,
	0x64, 0x2e, 0x76, 0x31, 0x2e, 0x4c, 0x65, 0x61, 0x73, 0x65, 0x53, 0x74, 0x61, 0x74, 0x75, 0x73,
	0x2e, 0x53, 0x74, 0x61, 0x74, 0x65, 0x52, 0x05, 0x73, 0x74, 0x61, 0x74, 0x65, 0x12, 0x15, 0x0a,
	0x06, 0x74, 0x74, 0x6c, 0x5f, 0x6d, 0x73, 0x18, 0x03, 0x20, 0x01, 0x28, 0x04, 0x52, 0x05, 0x74,
	0x74, 0x6c, 0x4d, 0x73, 0x12, 0x14, 0x0a, 0x05, 0x66, 0x65, 0x6e, 0x63, 0x65, 0x18, 0x04, 0x20,
	0x01, 0x28, 0x04, 0x52, 0x05, 0x66, 0x65, 0x6e, 0x63, 0x65, 0x12, 0x30, 0x0a, 0x06, 0x72, 0x65,
	0x61, 0x73, 0x6f, 0x6e, 0x18, 0x05, 0x20, 0x01, 0x28, 0x0e, 0x32, 0x18, 0x2e, 0x6c, 0x65, 0x61,
	0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x4c, 0x6f, 0x73, 0x73, 0x52, 0x65,
	0x61, 0x73, 0x6f, 0x6e, 0x52, 0x06, 0x72, 0x65, 0x61, 0x73, 0x6f, 0x6e, 0x12, 0x18, 0x0a, 0x07,
	0x6d, 0x65, 0x73, 0x73, 0x61, 0x67, 0x65, 0x18, 0x06, 0x20, 0x01, 0x28, 0x09, 0x52, 0x07, 0x6d,
	0x65, 0x73, 0x73, 0x61, 0x67, 0x65, 0x22, 0x6a, 0x0a, 0x05, 0x53, 0x74, 0x61, 0x74, 0x65, 0x12,
	0x15, 0x0a, 0x11, 0x53, 0x54, 0x41, 0x54, 0x45, 0x5f, 0x55, 0x4e, 0x53, 0x50, 0x45, 0x43, 0x49,
	0x46, 0x49, 0x45, 0x44, 0x10, 0x00, 0x12, 0x0f, 0x0a, 0x0b, 0x53, 0x54, 0x41, 0x54, 0x45, 0x5f,
	0x41, 0x4c, 0x49, 0x56, 0x45, 0x10, 0x01, 0x12, 0x0e, 0x0a, 0x0a, 0x53, 0x54, 0x41, 0x54, 0x45,
	0x5f, 0x4c, 0x4f, 0x53, 0x54, 0x10, 0x02, 0x12, 0x15, 0x0a, 0x11, 0x53, 0x54, 0x41, 0x54, 0x45,
	0x5f, 0x55, 0x4e, 0x43, 0x4f, 0x4e, 0x46, 0x49, 0x52, 0x4d, 0x45, 0x44, 0x10, 0x03, 0x12, 0x12,
	0x0a, 0x0e, 0x53, 0x54, 0x41, 0x54, 0x45, 0x5f, 0x52, 0x45, 0x4a, 0x45, 0x43, 0x54, 0x45, 0x44,
	0x10, 0x04, 0x22, 0xe9, 0x02, 0x0a, 0x0e, 0x53, 0x65, 0x73, 0x73, 0x69, 0x6f, 0x6e, 0x52, 0x65,
	0x71, 0x75, 0x65, 0x73, 0x74, 0x12, 0x0e, 0x0a, 0x02, 0x69, 0x64, 0x18, 0x01, 0x20, 0x01, 0x28,
	0x04, 0x52, 0x02, 0x69, 0x64, 0x12, 0x1d, 0x0a, 0x0a, 0x74, 0x69, 0x6d, 0x65, 0x6f, 0x75, 0x74,
	0x5f, 0x6d, 0x73, 0x18, 0x02, 0x20, 0x01, 0x28, 0x04, 0x52, 0x09, 0x74, 0x69, 0x6d, 0x65, 0x6f,
	0x75, 0x74, 0x4d, 0x73, 0x12, 0x38, 0x0a, 0x07, 0x61, 0x63, 0x71, 0x75, 0x69, 0x72, 0x65, 0x18,
	0x03, 0x20, 0x01, 0x28, 0x0b, 0x32, 0x1c, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c,
	0x64, 0x2e, 0x76, 0x31, 0x2e, 0x41, 0x63, 0x71, 0x75, 0x69, 0x72, 0x65, 0x52, 0x65, 0x71, 0x75,
	0x65, 0x73, 0x74, 0x48, 0x00, 0x52, 0x07, 0x61, 0x63, 0x71, 0x75, 0x69, 0x72, 0x65, 0x12, 0x32,
	0x0a, 0x05, 0x72, 0x65, 0x6e, 0x65, 0x77, 0x18, 0x04, 0x20, 0x01, 0x28, 0x0b, 0x32, 0x1a, 0x2e,
	0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x52, 0x65, 0x6e,
	0x65, 0x77, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x48, 0x00, 0x52, 0x05, 0x72, 0x65, 0x6e,
	0x65, 0x77, 0x12, 0x38, 0x0a, 0x07, 0x72, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x18, 0x05, 0x20,
	0x01, 0x28, 0x0b, 0x32, 0x1c, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e,
	0x76, 0x31, 0x2e, 0x52, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73,
	0x74, 0x48, 0x00, 0x52, 0x07, 0x72, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x12, 0x3e, 0x0a, 0x09,
	0x68, 0x65, 0x61, 0x72, 0x74, 0x62, 0x65, 0x61, 0x74, 0x18, 0x06, 0x20, 0x01, 0x28, 0x0b, 0x32,
	0x1e, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x4b,
	0x65, 0x65, 0x70, 0x41, 0x6c, 0x69, 0x76, 0x65, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x48,
	0x00, 0x52, 0x09, 0x68, 0x65, 0x61, 0x72, 0x74, 0x62, 0x65, 0x61, 0x74, 0x12, 0x35, 0x0a, 0x06,
	0x63, 0x61, 0x6e, 0x63, 0x65, 0x6c, 0x18, 0x07, 0x20, 0x01, 0x28, 0x0b, 0x32, 0x1b, 0x2e, 0x6c,
	0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x53, 0x65, 0x73, 0x73,
	0x69, 0x6f, 0x6e, 0x43, 0x61, 0x6e, 0x63, 0x65, 0x6c, 0x48, 0x00, 0x52, 0x06, 0x63, 0x61, 0x6e,
	0x63, 0x65, 0x6c, 0x42, 0x09, 0x0a, 0x07, 0x72, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x22, 0x1f,
	0x0a, 0x0d, 0x53, 0x65, 0x73, 0x73, 0x69, 0x6f, 0x6e, 0x43, 0x61, 0x6e, 0x63, 0x65, 0x6c, 0x12,
	0x0e, 0x0a, 0x02, 0x69, 0x64, 0x18, 0x01, 0x20, 0x01, 0x28, 0x04, 0x52, 0x02, 0x69, 0x64, 0x22,
	0xcd, 0x02, 0x0a, 0x0f, 0x53, 0x65, 0x73, 0x73, 0x69, 0x6f, 0x6e, 0x52, 0x65, 0x73, 0x70, 0x6f,
	0x6e, 0x73, 0x65, 0x12, 0x0e, 0x0a, 0x02, 0x69, 0x64, 0x18, 0x01, 0x20, 0x01, 0x28, 0x04, 0x52,
	0x02, 0x69, 0x64, 0x12, 0x39, 0x0a, 0x07, 0x61, 0x63, 0x71, 0x75, 0x69, 0x72, 0x65, 0x18, 0x02,
	0x20, 0x01, 0x28, 0x0b, 0x32, 0x1d, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64,
	0x2e, 0x76, 0x31, 0x2e, 0x41, 0x63, 0x71, 0x75, 0x69, 0x72, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f,
	0x6e, 0x73, 0x65, 0x48, 0x00, 0x52, 0x07, 0x61, 0x63, 0x71, 0x75, 0x69, 0x72, 0x65, 0x12, 0x33,
	0x0a, 0x05, 0x72, 0x65, 0x6e, 0x65, 0x77, 0x18, 0x03, 0x20, 0x01, 0x28, 0x0b, 0x32, 0x1b, 0x2e,
	0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x52, 0x65, 0x6e,
	0x65, 0x77, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x48, 0x00, 0x52, 0x05, 0x72, 0x65,
	0x6e, 0x65, 0x77, 0x12, 0x39, 0x0a, 0x07, 0x72, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x18, 0x04,
	0x20, 0x01, 0x28, 0x0b, 0x32, 0x1d, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64,
	0x2e, 0x76, 0x31, 0x2e, 0x52, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f,
	0x6e, 0x73, 0x65, 0x48, 0x00, 0x52, 0x07, 0x72, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x12, 0x3f,
	0x0a, 0x09, 0x68, 0x65, 0x61, 0x72, 0x74, 0x62, 0x65, 0x61, 0x74, 0x18, 0x05, 0x20, 0x01, 0x28,
	0x0b, 0x32, 0x1f, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31,
	0x2e, 0x4b, 0x65, 0x65, 0x70, 0x41, 0x6c, 0x69, 0x76, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e,
	0x73, 0x65, 0x48, 0x00, 0x52, 0x09, 0x68, 0x65, 0x61, 0x72, 0x74, 0x62, 0x65, 0x61, 0x74, 0x12,
	0x32, 0x0a, 0x05, 0x65, 0x72, 0x72, 0x6f, 0x72, 0x18, 0x06, 0x20, 0x01, 0x28, 0x0b, 0x32, 0x1a,
	0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x53, 0x65,
	0x73, 0x73, 0x69, 0x6f, 0x6e, 0x45, 0x72, 0x72, 0x6f, 0x72, 0x48, 0x00, 0x52, 0x05, 0x65, 0x72,
	0x72, 0x6f, 0x72, 0x42, 0x0a, 0x0a, 0x08, 0x72, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x22,
	0x93, 0x02, 0x0a, 0x0c, 0x53, 0x65, 0x73, 0x73, 0x69, 0x6f, 0x6e, 0x45, 0x72, 0x72, 0x6f, 0x72,
	0x12, 0x12, 0x0a, 0x04, 0x63, 0x6f, 0x64, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28, 0x05, 0x52, 0x04,
	0x63, 0x6f, 0x64, 0x65, 0x12, 0x18, 0x0a, 0x07, 0x6d, 0x65, 0x73, 0x73, 0x61, 0x67, 0x65, 0x18,
	0x02, 0x20, 0x01, 0x28, 0x09, 0x52, 0x07, 0x6d, 0x65, 0x73, 0x73, 0x61, 0x67, 0x65, 0x12, 0x14,
	0x0a, 0x05, 0x70, 0x6c, 0x61, 0x63, 0x65, 0x18, 0x03, 0x20, 0x01, 0x28, 0x09, 0x52, 0x05, 0x70,
	0x6c, 0x61, 0x63, 0x65, 0x12, 0x16, 0x0a, 0x06, 0x72, 0x65, 0x61, 0x73, 0x6f, 0x6e, 0x18, 0x04,
	0x20, 0x01, 0x28, 0x09, 0x52, 0x06, 0x72, 0x65, 0x61, 0x73, 0x6f, 0x6e, 0x12, 0x44, 0x0a, 0x08,
	0x6d, 0x65, 0x74, 0x61, 0x64, 0x61, 0x74, 0x61, 0x18, 0x05, 0x20, 0x03, 0x28, 0x0b, 0x32, 0x28,
	0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x53, 0x65,
	0x73, 0x73, 0x69, 0x6f, 0x6e, 0x45, 0x72, 0x72, 0x6f, 0x72, 0x2e, 0x4d, 0x65, 0x74, 0x61, 0x64,
	0x61, 0x74, 0x61, 0x45, 0x6e, 0x74, 0x72, 0x79, 0x52, 0x08, 0x6d, 0x65, 0x74, 0x61, 0x64, 0x61,
	0x74, 0x61, 0x12, 0x24, 0x0a, 0x0e, 0x72, 0x65, 0x74, 0x72, 0x79, 0x5f, 0x64, 0x65, 0x6c, 0x61,
	0x79, 0x5f, 0x6d, 0x73, 0x18, 0x06, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0c, 0x72, 0x65, 0x74, 0x72,
	0x79, 0x44, 0x65, 0x6c, 0x61, 0x79, 0x4d, 0x73, 0x1a, 0x3b, 0x0a, 0x0d, 0x4d, 0x65, 0x74, 0x61,
	0x64, 0x61, 0x74, 0x61, 0x45, 0x6e, 0x74, 0x72, 0x79, 0x12, 0x10, 0x0a, 0x03, 0x6b, 0x65, 0x79,
	0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x03, 0x6b, 0x65, 0x79, 0x12, 0x14, 0x0a, 0x05, 0x76,
	0x61, 0x6c, 0x75, 0x65, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09, 0x52, 0x05, 0x76, 0x61, 0x6c, 0x75,
	0x65, 0x3a, 0x02, 0x38, 0x01, 0x22, 0xb7, 0x01, 0x0a, 0x0f, 0x43, 0x61, 0x6d, 0x70, 0x61, 0x69,
	0x67, 0x6e, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x12, 0x1a, 0x0a, 0x08, 0x65, 0x6c, 0x65,
	0x63, 0x74, 0x69, 0x6f, 0x6e, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x08, 0x65, 0x6c, 0x65,
	0x63, 0x74, 0x69, 0x6f, 0x6e, 0x12, 0x14, 0x0a, 0x05, 0x76, 0x61, 0x6c, 0x75, 0x65, 0x18, 0x02,
	0x20, 0x01, 0x28, 0x09, 0x52, 0x05, 0x76, 0x61, 0x6c, 0x75, 0x65, 0x12, 0x15, 0x0a, 0x06, 0x74,
	0x74, 0x6c, 0x5f, 0x6d, 0x73, 0x18, 0x03, 0x20, 0x01, 0x28, 0x04, 0x52, 0x05, 0x74, 0x74, 0x6c,
	0x4d, 0x73, 0x12, 0x26, 0x0a, 0x0f, 0x77, 0x61, 0x69, 0x74, 0x5f, 0x74, 0x69, 0x6d, 0x65, 0x6f,
	0x75, 0x74, 0x5f, 0x6d, 0x73, 0x18, 0x04, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0d, 0x77, 0x61, 0x69,
	0x74, 0x54, 0x69, 0x6d, 0x65, 0x6f, 0x75, 0x74, 0x4d, 0x73, 0x12, 0x1d, 0x0a, 0x0a, 0x6b, 0x65,
	0x65, 0x70, 0x5f, 0x70, 0x6c, 0x61, 0x63, 0x65, 0x18, 0x05, 0x20, 0x01, 0x28, 0x08, 0x52, 0x09,
	0x6b, 0x65, 0x65, 0x70, 0x50, 0x6c, 0x61, 0x63, 0x65, 0x12, 0x14, 0x0a, 0x05, 0x70, 0x6c, 0x61,
	0x63, 0x65, 0x18, 0x06, 0x20, 0x01, 0x28, 0x09, 0x52, 0x05, 0x70, 0x6c, 0x61, 0x63, 0x65, 0x22,
	0x5a, 0x0a, 0x10, 0x43, 0x61, 0x6d, 0x70, 0x61, 0x69, 0x67, 0x6e, 0x52, 0x65, 0x73, 0x70, 0x6f,
	0x6e, 0x73, 0x65, 0x12, 0x29, 0x0a, 0x05, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x18, 0x01, 0x20, 0x01,
	0x28, 0x0b, 0x32, 0x13, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76,
	0x31, 0x2e, 0x4c, 0x65, 0x61, 0x73, 0x65, 0x52, 0x05, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x12, 0x1b,
	0x0a, 0x09, 0x77, 0x61, 0x69, 0x74, 0x65, 0x64, 0x5f, 0x6d, 0x73, 0x18, 0x02, 0x20, 0x01, 0x28,
	0x04, 0x52, 0x08, 0x77, 0x61, 0x69, 0x74, 0x65, 0x64, 0x4d, 0x73, 0x22, 0x2b, 0x0a, 0x0d, 0x4c,
	0x65, 0x61, 0x64, 0x65, 0x72, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x12, 0x1a, 0x0a, 0x08,
	0x65, 0x6c, 0x65, 0x63, 0x74, 0x69, 0x6f, 0x6e, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x08,
	0x65, 0x6c, 0x65, 0x63, 0x74, 0x69, 0x6f, 0x6e, 0x22, 0x77, 0x0a, 0x0e, 0x4c, 0x65, 0x61, 0x64,
	0x65, 0x72, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x12, 0x18, 0x0a, 0x07, 0x70, 0x72,
	0x65, 0x73, 0x65, 0x6e, 0x74, 0x18, 0x01, 0x20, 0x01, 0x28, 0x08, 0x52, 0x07, 0x70, 0x72, 0x65,
	0x73, 0x65, 0x6e, 0x74, 0x12, 0x14, 0x0a, 0x05, 0x76, 0x61, 0x6c, 0x75, 0x65, 0x18, 0x02, 0x20,
	0x01, 0x28, 0x09, 0x52, 0x05, 0x76, 0x61, 0x6c, 0x75, 0x65, 0x12, 0x12, 0x0a, 0x04, 0x74, 0x65,
	0x72, 0x6d, 0x18, 0x03, 0x20, 0x01, 0x28, 0x04, 0x52, 0x04, 0x74, 0x65, 0x72, 0x6d, 0x12, 0x21,
	0x0a, 0x0c, 0x72, 0x65, 0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67, 0x5f, 0x6d, 0x73, 0x18, 0x04,
	0x20, 0x01, 0x28, 0x04, 0x52, 0x0b, 0x72, 0x65, 0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67, 0x4d,
	0x73, 0x22, 0x2c, 0x0a, 0x0e, 0x4f, 0x62, 0x73, 0x65, 0x72, 0x76, 0x65, 0x52, 0x65, 0x71, 0x75,
	0x65, 0x73, 0x74, 0x12, 0x1a, 0x0a, 0x08, 0x65, 0x6c, 0x65, 0x63, 0x74, 0x69, 0x6f, 0x6e, 0x18,
	0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x08, 0x65, 0x6c, 0x65, 0x63, 0x74, 0x69, 0x6f, 0x6e, 0x22,
	0x78, 0x0a, 0x0f, 0x4f, 0x62, 0x73, 0x65, 0x72, 0x76, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e,
	0x73, 0x65, 0x12, 0x18, 0x0a, 0x07, 0x70, 0x72, 0x65, 0x73, 0x65, 0x6e, 0x74, 0x18, 0x01, 0x20,
	0x01, 0x28, 0x08, 0x52, 0x07, 0x70, 0x72, 0x65, 0x73, 0x65, 0x6e, 0x74, 0x12, 0x14, 0x0a, 0x05,
	0x76, 0x61, 0x6c, 0x75, 0x65, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09, 0x52, 0x05, 0x76, 0x61, 0x6c,
	0x75, 0x65, 0x12, 0x12, 0x0a, 0x04, 0x74, 0x65, 0x72, 0x6d, 0x18, 0x03, 0x20, 0x01, 0x28, 0x04,
	0x52, 0x04, 0x74, 0x65, 0x72, 0x6d, 0x12, 0x21, 0x0a, 0x0c, 0x72, 0x65, 0x6d, 0x61, 0x69, 0x6e,
	0x69, 0x6e, 0x67, 0x5f, 0x6d, 0x73, 0x18, 0x04, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0b, 0x72, 0x65,
	0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67, 0x4d, 0x73, 0x22, 0x4c, 0x0a, 0x0d, 0x52, 0x65, 0x73,
	0x69, 0x67, 0x6e, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x12, 0x1a, 0x0a, 0x08, 0x65, 0x6c,
	0x65, 0x63, 0x74, 0x69, 0x6f, 0x6e, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x08, 0x65, 0x6c,
	0x65, 0x63, 0x74, 0x69, 0x6f, 0x6e, 0x12, 0x1f, 0x0a, 0x0b, 0x6f, 0x77, 0x6e, 0x65, 0x72, 0x5f,
	0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09, 0x52, 0x0a, 0x6f, 0x77, 0x6e,
	0x65, 0x72, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x22, 0x10, 0x0a, 0x0e, 0x52, 0x65, 0x73, 0x69, 0x67,
	0x6e, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x2a, 0x92, 0x01, 0x0a, 0x0a, 0x4c, 0x6f,
	0x73, 0x73, 0x52, 0x65, 0x61, 0x73, 0x6f, 0x6e, 0x12, 0x1b, 0x0a, 0x17, 0x4c, 0x4f, 0x53, 0x53,
	0x5f, 0x52, 0x45, 0x41, 0x53, 0x4f, 0x4e, 0x5f, 0x55, 0x4e, 0x53, 0x50, 0x45, 0x43, 0x49, 0x46,
	0x49, 0x45, 0x44, 0x10, 0x00, 0x12, 0x17, 0x0a, 0x13, 0x4c, 0x4f, 0x53, 0x53, 0x5f, 0x52, 0x45,
	0x41, 0x53, 0x4f, 0x4e, 0x5f, 0x45, 0x58, 0x50, 0x49, 0x52, 0x45, 0x44, 0x10, 0x01, 0x12, 0x19,
	0x0a, 0x15, 0x4c, 0x4f, 0x53, 0x53, 0x5f, 0x52, 0x45, 0x41, 0x53, 0x4f, 0x4e, 0x5f, 0x4e, 0x4f,
	0x54, 0x5f, 0x4f, 0x57, 0x4e, 0x45, 0x52, 0x10, 0x02, 0x12, 0x1a, 0x0a, 0x16, 0x4c, 0x4f, 0x53,
	0x53, 0x5f, 0x52, 0x45, 0x41, 0x53, 0x4f, 0x4e, 0x5f, 0x53, 0x54, 0x4f, 0x52, 0x45, 0x5f, 0x4c,
	0x4f, 0x53, 0x54, 0x10, 0x03, 0x12, 0x17, 0x0a, 0x13, 0x4c, 0x4f, 0x53, 0x53, 0x5f, 0x52, 0x45,
	0x41, 0x53, 0x4f, 0x4e, 0x5f, 0x52, 0x45, 0x56, 0x4f, 0x4b, 0x45, 0x44, 0x10, 0x04, 0x32, 0xc1,
	0x07, 0x0a, 0x10, 0x4c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x53, 0x65, 0x72, 0x76,
	0x69, 0x63, 0x65, 0x12, 0x46, 0x0a, 0x07, 0x41, 0x63, 0x71, 0x75, 0x69, 0x72, 0x65, 0x12, 0x1c,
	0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x41, 0x63,
	0x71, 0x75, 0x69, 0x72, 0x65, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x1a, 0x1d, 0x2e, 0x6c,
	0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x41, 0x63, 0x71, 0x75,
	0x69, 0x72, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x12, 0x40, 0x0a, 0x05, 0x52,
	0x65, 0x6e, 0x65, 0x77, 0x12, 0x1a, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64,
	0x2e, 0x76, 0x31, 0x2e, 0x52, 0x65, 0x6e, 0x65, 0x77, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74,
	0x1a, 0x1b, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e,
	0x52, 0x65, 0x6e, 0x65, 0x77, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x12, 0x46, 0x0a,
	0x07, 0x52, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x12, 0x1c, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65,
	0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x52, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x52,
	0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x1a, 0x1d, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f,
	0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x52, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x52, 0x65, 0x73,
	0x70, 0x6f, 0x6e, 0x73, 0x65, 0x12, 0x49, 0x0a, 0x08, 0x44, 0x65, 0x73, 0x63, 0x72, 0x69, 0x62,
	0x65, 0x12, 0x1d, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31,
	0x2e, 0x44, 0x65, 0x73, 0x63, 0x72, 0x69, 0x62, 0x65, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74,
	0x1a, 0x1e, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e,
	0x44, 0x65, 0x73, 0x63, 0x72, 0x69, 0x62, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65,
	0x12, 0x3d, 0x0a, 0x04, 0x4c, 0x69, 0x73, 0x74, 0x12, 0x19, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65,
	0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x4c, 0x69, 0x73, 0x74, 0x52, 0x65, 0x71, 0x75,
	0x65, 0x73, 0x74, 0x1a, 0x1a, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e,
	0x76, 0x31, 0x2e, 0x4c, 0x69, 0x73, 0x74, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x12,
	0x50, 0x0a, 0x09, 0x4b, 0x65, 0x65, 0x70, 0x41, 0x6c, 0x69, 0x76, 0x65, 0x12, 0x1e, 0x2e, 0x6c,
	0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x4b, 0x65, 0x65, 0x70,
	0x41, 0x6c, 0x69, 0x76, 0x65, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x1a, 0x1f, 0x2e, 0x6c,
	0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x4b, 0x65, 0x65, 0x70,
	0x41, 0x6c, 0x69, 0x76, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x28, 0x01, 0x30,
	0x01, 0x12, 0x4a, 0x0a, 0x07, 0x53, 0x65, 0x73, 0x73, 0x69, 0x6f, 0x6e, 0x12, 0x1c, 0x2e, 0x6c,
	0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x53, 0x65, 0x73, 0x73,
	0x69, 0x6f, 0x6e, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x1a, 0x1d, 0x2e, 0x6c, 0x65, 0x61,
	0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x53, 0x65, 0x73, 0x73, 0x69, 0x6f,
	0x6e, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x28, 0x01, 0x30, 0x01, 0x12, 0x4f, 0x0a,
	0x0a, 0x43, 0x68, 0x65, 0x63, 0x6b, 0x46, 0x65, 0x6e, 0x63, 0x65, 0x12, 0x1f, 0x2e, 0x6c, 0x65,
	0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x43, 0x68, 0x65, 0x63, 0x6b,
	0x46, 0x65, 0x6e, 0x63, 0x65, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x1a, 0x20, 0x2e, 0x6c,
	0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x43, 0x68, 0x65, 0x63,
	0x6b, 0x46, 0x65, 0x6e, 0x63, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x12, 0x43,
	0x0a, 0x06, 0x52, 0x65, 0x76, 0x6f, 0x6b, 0x65, 0x12, 0x1b, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65,
	0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x52, 0x65, 0x76, 0x6f, 0x6b, 0x65, 0x52, 0x65,
	0x71, 0x75, 0x65, 0x73, 0x74, 0x1a, 0x1c, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c,
	0x64, 0x2e, 0x76, 0x31, 0x2e, 0x52, 0x65, 0x76, 0x6f, 0x6b, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f,
	0x6e, 0x73, 0x65, 0x12, 0x49, 0x0a, 0x08, 0x43, 0x61, 0x6d, 0x70, 0x61, 0x69, 0x67, 0x6e, 0x12,
	0x1d, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x43,
	0x61, 0x6d, 0x70, 0x61, 0x69, 0x67, 0x6e, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x1a, 0x1e,
	0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x43, 0x61,
	0x6d, 0x70, 0x61, 0x69, 0x67, 0x6e, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x12, 0x43,
	0x0a, 0x06, 0x4c, 0x65, 0x61, 0x64, 0x65, 0x72, 0x12, 0x1b, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65,
	0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x4c, 0x65, 0x61, 0x64, 0x65, 0x72, 0x52, 0x65,
	0x71, 0x75, 0x65, 0x73, 0x74, 0x1a, 0x1c, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c,
	0x64, 0x2e, 0x76, 0x31, 0x2e, 0x4c, 0x65, 0x61, 0x64, 0x65, 0x72, 0x52, 0x65, 0x73, 0x70, 0x6f,
	0x6e, 0x73, 0x65, 0x12, 0x48, 0x0a, 0x07, 0x4f, 0x62, 0x73, 0x65, 0x72, 0x76, 0x65, 0x12, 0x1c,
	0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x4f, 0x62,
	0x73, 0x65, 0x72, 0x76, 0x65, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x1a, 0x1d, 0x2e, 0x6c,
	0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x4f, 0x62, 0x73, 0x65,
	0x72, 0x76, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x30, 0x01, 0x12, 0x43, 0x0a,
	0x06, 0x52, 0x65, 0x73, 0x69, 0x67, 0x6e, 0x12, 0x1b, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68,
	0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x2e, 0x52, 0x65, 0x73, 0x69, 0x67, 0x6e, 0x52, 0x65, 0x71,
	0x75, 0x65, 0x73, 0x74, 0x1a, 0x1c, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64,
	0x2e, 0x76, 0x31, 0x2e, 0x52, 0x65, 0x73, 0x69, 0x67, 0x6e, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e,
	0x73, 0x65, 0x42, 0xa8, 0x01, 0x0a, 0x10, 0x63, 0x6f, 0x6d, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65,
	0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x76, 0x31, 0x42, 0x0e, 0x4c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f,
	0x6c, 0x64, 0x50, 0x72, 0x6f, 0x74, 0x6f, 0x50, 0x01, 0x5a, 0x3e, 0x67, 0x69, 0x74, 0x68, 0x75,
	0x62, 0x2e, 0x63, 0x6f, 0x6d, 0x2f, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2f,
	0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2f, 0x67, 0x65, 0x6e, 0x2f, 0x67, 0x6f,
	0x2f, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2f, 0x76, 0x31, 0x3b, 0x6c, 0x65,
	0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x76, 0x31, 0xa2, 0x02, 0x03, 0x4c, 0x58, 0x58, 0xaa,
	0x02, 0x0c, 0x4c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x2e, 0x56, 0x31, 0xba, 0x02,
	0x0d, 0x4c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x5f, 0x56, 0x31, 0x5f, 0xca, 0x02,
	0x0c, 0x4c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x5c, 0x56, 0x31, 0xea, 0x02, 0x0d,
	0x4c, 0x65, 0x61, 0x73, 0x65, 0x68, 0x6f, 0x6c, 0x64, 0x3a, 0x3a, 0x56, 0x31, 0x62, 0x06, 0x70,
	0x72, 0x6f, 0x74, 0x6f, 0x33,
}

var (
	file_leasehold_v1_leasehold_proto_rawDescOnce sync.Once
	file_leasehold_v1_leasehold_proto_rawDescData = file_leasehold_v1_leasehold_proto_rawDesc
)

func file_leasehold_v1_leasehold_proto_rawDescGZIP() []byte {
	file_leasehold_v1_leasehold_proto_rawDescOnce.Do(func() {
		file_leasehold_v1_leasehold_proto_rawDescData = protoimpl.X.CompressGZIP(file_leasehold_v1_leasehold_proto_rawDescData)
	})
	return file_leasehold_v1_leasehold_proto_rawDescData
}

var file_leasehold_v1_leasehold_proto_enumTypes = make([]protoimpl.EnumInfo, 2)
var file_leasehold_v1_leasehold_proto_msgTypes = make([]protoimpl.MessageInfo, 34)
var file_leasehold_v1_leasehold_proto_goTypes = []interface{}{
	(LossReason)(0),            // 0: leasehold.v1.LossReason
	(LeaseStatus_State)(0),     // 1: leasehold.v1.LeaseStatus.State
	(*Lease)(nil),              // 2: leasehold.v1.Lease
	(*AcquireRequest)(nil),     // 3: leasehold.v1.AcquireRequest
	(*AcquireResponse)(nil),    // 4: leasehold.v1.AcquireResponse
	(*RenewRequest)(nil),       // 5: leasehold.v1.RenewRequest
	(*RenewResponse)(nil),      // 6: leasehold.v1.RenewResponse
	(*ReleaseRequest)(nil),     // 7: leasehold.v1.ReleaseRequest
	(*ReleaseResponse)(nil),    // 8: leasehold.v1.ReleaseResponse
	(*DescribeRequest)(nil),    // 9: leasehold.v1.DescribeRequest
	(*DescribeResponse)(nil),   // 10: leasehold.v1.DescribeResponse
	(*ListRequest)(nil),        // 11: leasehold.v1.ListRequest
	(*ListResponse)(nil),       // 12: leasehold.v1.ListResponse
	(*ListedLock)(nil),         // 13: leasehold.v1.ListedLock
	(*CheckFenceRequest)(nil),  // 14: leasehold.v1.CheckFenceRequest
	(*CheckFenceResponse)(nil), // 15: leasehold.v1.CheckFenceResponse
	(*RevokeRequest)(nil),      // 16: leasehold.v1.RevokeRequest
	(*RevokeResponse)(nil),     // 17: leasehold.v1.RevokeResponse
	(*KeepAliveRequest)(nil),   // 18: leasehold.v1.KeepAliveRequest
	(*LeaseRef)(nil),           // 19: leasehold.v1.LeaseRef
	(*KeepAliveResponse)(nil),  // 20: leasehold.v1.KeepAliveResponse
	(*TtlAdvice)(nil),          // 21: leasehold.v1.TtlAdvice
	(*LeaseStatus)(nil),        // 22: leasehold.v1.LeaseStatus
	(*SessionRequest)(nil),     // 23: leasehold.v1.SessionRequest
	(*SessionCancel)(nil),      // 24: leasehold.v1.SessionCancel
	(*SessionResponse)(nil),    // 25: leasehold.v1.SessionResponse
	(*SessionError)(nil),       // 26: leasehold.v1.SessionError
	(*CampaignRequest)(nil),    // 27: leasehold.v1.CampaignRequest
	(*CampaignResponse)(nil),   // 28: leasehold.v1.CampaignResponse
	(*LeaderRequest)(nil),      // 29: leasehold.v1.LeaderRequest
	(*LeaderResponse)(nil),     // 30: leasehold.v1.LeaderResponse
	(*ObserveRequest)(nil),     // 31: leasehold.v1.ObserveRequest
	(*ObserveResponse)(nil),    // 32: leasehold.v1.ObserveResponse
	(*ResignRequest)(nil),      // 33: leasehold.v1.ResignRequest
	(*ResignResponse)(nil),     // 34: leasehold.v1.ResignResponse
	nil,                        // 35: leasehold.v1.SessionError.MetadataEntry
}
var file_leasehold_v1_leasehold_proto_depIdxs = []int32{
	2,  // 0: leasehold.v1.AcquireResponse.lease:type_name -> leasehold.v1.Lease
	13, // 1: leasehold.v1.ListResponse.locks:type_name -> leasehold.v1.ListedLock
	19, // 2: leasehold.v1.KeepAliveRequest.leases:type_name -> leasehold.v1.LeaseRef
	22, // 3: leasehold.v1.KeepAliveResponse.leases:type_name -> leasehold.v1.LeaseStatus
	21, // 4: leasehold.v1.KeepAliveResponse.advice:type_name -> leasehold.v1.TtlAdvice
	1,  // 5: leasehold.v1.LeaseStatus.state:type_name -> leasehold.v1.LeaseStatus.State
	0,  // 6: leasehold.v1.LeaseStatus.reason:type_name -> leasehold.v1.LossReason
	3,  // 7: leasehold.v1.SessionRequest.acquire:type_name -> leasehold.v1.AcquireRequest
	5,  // 8: leasehold.v1.SessionRequest.renew:type_name -> leasehold.v1.RenewRequest
	7,  // 9: leasehold.v1.SessionRequest.release:type_name -> leasehold.v1.ReleaseRequest
	18, // 10: leasehold.v1.SessionRequest.heartbeat:type_name -> leasehold.v1.KeepAliveRequest
	24, // 11: leasehold.v1.SessionRequest.cancel:type_name -> leasehold.v1.SessionCancel
	4,  // 12: leasehold.v1.SessionResponse.acquire:type_name -> leasehold.v1.AcquireResponse
	6,  // 13: leasehold.v1.SessionResponse.renew:type_name -> leasehold.v1.RenewResponse
	8,  // 14: leasehold.v1.SessionResponse.release:type_name -> leasehold.v1.ReleaseResponse
	20, // 15: leasehold.v1.SessionResponse.heartbeat:type_name -> leasehold.v1.KeepAliveResponse
	26, // 16: leasehold.v1.SessionResponse.error:type_name -> leasehold.v1.SessionError
	35, // 17: leasehold.v1.SessionError.metadata:type_name -> leasehold.v1.SessionError.MetadataEntry
	2,  // 18: leasehold.v1.CampaignResponse.lease:type_name -> leasehold.v1.Lease
	3,  // 19: leasehold.v1.LeaseholdService.Acquire:input_type -> leasehold.v1.AcquireRequest
	5,  // 20: leasehold.v1.LeaseholdService.Renew:input_type -> leasehold.v1.RenewRequest
	7,  // 21: leasehold.v1.LeaseholdService.Release:input_type -> leasehold.v1.ReleaseRequest
	9,  // 22: leasehold.v1.LeaseholdService.Describe:input_type -> leasehold.v1.DescribeRequest
	11, // 23: leasehold.v1.LeaseholdService.List:input_type -> leasehold.v1.ListRequest
	18, // 24: leasehold.v1.LeaseholdService.KeepAlive:input_type -> leasehold.v1.KeepAliveRequest
	23, // 25: leasehold.v1.LeaseholdService.Session:input_type -> leasehold.v1.SessionRequest
	14, // 26: leasehold.v1.LeaseholdService.CheckFence:input_type -> leasehold.v1.CheckFenceRequest
	16, // 27: leasehold.v1.LeaseholdService.Revoke:input_type -> leasehold.v1.RevokeRequest
	27, // 28: leasehold.v1.LeaseholdService.Campaign:input_type -> leasehold.v1.CampaignRequest
	29, // 29: leasehold.v1.LeaseholdService.Leader:input_type -> leasehold.v1.LeaderRequest
	31, // 30: leasehold.v1.LeaseholdService.Observe:input_type -> leasehold.v1.ObserveRequest
	33, // 31: leasehold.v1.LeaseholdService.Resign:input_type -> leasehold.v1.ResignRequest
	4,  // 32: leasehold.v1.LeaseholdService.Acquire:output_type -> leasehold.v1.AcquireResponse
	6,  // 33: leasehold.v1.LeaseholdService.Renew:output_type -> leasehold.v1.RenewResponse
	8,  // 34: leasehold.v1.LeaseholdService.Release:output_type -> leasehold.v1.ReleaseResponse
	10, // 35: leasehold.v1.LeaseholdService.Describe:output_type -> leasehold.v1.DescribeResponse
	12, // 36: leasehold.v1.LeaseholdService.List:output_type -> leasehold.v1.ListResponse
	20, // 37: leasehold.v1.LeaseholdService.KeepAlive:output_type -> leasehold.v1.KeepAliveResponse
	25, // 38: leasehold.v1.LeaseholdService.Session:output_type -> leasehold.v1.SessionResponse
	15, // 39: leasehold.v1.LeaseholdService.CheckFence:output_type -> leasehold.v1.CheckFenceResponse
	17, // 40: leasehold.v1.LeaseholdService.Revoke:output_type -> leasehold.v1.RevokeResponse
	28, // 41: leasehold.v1.LeaseholdService.Campaign:output_type -> leasehold.v1.CampaignResponse
	30, // 42: leasehold.v1.LeaseholdService.Leader:output_type -> leasehold.v1.LeaderResponse
	32, // 43: leasehold.v1.LeaseholdService.Observe:output_type -> leasehold.v1.ObserveResponse
	34, // 44: leasehold.v1.LeaseholdService.Resign:output_type -> leasehold.v1.ResignResponse
	32, // [32:45] is the sub-list for method output_type
	19, // [19:32] is the sub-list for method input_type
	19, // [19:19] is the sub-list for extension type_name
	19, // [19:19] is the sub-list for extension extendee
	0,  // [0:19] is the sub-list for field type_name
}

func init() { file_leasehold_v1_leasehold_proto_init() }
func file_leasehold_v1_leasehold_proto_init() {
	if File_leasehold_v1_leasehold_proto != nil {
		return
	}
	if !protoimpl.UnsafeEnabled {
		file_leasehold_v1_leasehold_proto_msgTypes[0].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*Lease); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[1].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*AcquireRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[2].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*AcquireResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[3].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*RenewRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[4].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*RenewResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[5].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*ReleaseRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[6].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*ReleaseResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[7].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*DescribeRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[8].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*DescribeResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[9].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*ListRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[10].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*ListResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[11].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*ListedLock); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[12].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*CheckFenceRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[13].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*CheckFenceResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[14].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*RevokeRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[15].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*RevokeResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[16].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*KeepAliveRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[17].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*LeaseRef); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[18].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*KeepAliveResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[19].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*TtlAdvice); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[20].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*LeaseStatus); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[21].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*SessionRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[22].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*SessionCancel); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[23].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*SessionResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[24].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*SessionError); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[25].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*CampaignRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[26].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*CampaignResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[27].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*LeaderRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[28].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*LeaderResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[29].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*ObserveRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[30].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*ObserveResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[31].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*ResignRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_leasehold_v1_leasehold_proto_msgTypes[32].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*ResignResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
	}
	file_leasehold_v1_leasehold_proto_msgTypes[21].OneofWrappers = []interface{}{
		(*SessionRequest_Acquire)(nil),
		(*SessionRequest_Renew)(nil),
		(*SessionRequest_Release)(nil),
		(*SessionRequest_Heartbeat)(nil),
		(*SessionRequest_Cancel)(nil),
	}
	file_leasehold_v1_leasehold_proto_msgTypes[23].OneofWrappers = []interface{}{
		(*SessionResponse_Acquire)(nil),
		(*SessionResponse_Renew)(nil),
		(*SessionResponse_Release)(nil),
		(*SessionResponse_Heartbeat)(nil),
		(*SessionResponse_Error)(nil),
	}
	type x struct{}
	out := protoimpl.TypeBuilder{
		File: protoimpl.DescBuilder{
			GoPackagePath: reflect.TypeOf(x{}).PkgPath(),
			RawDescriptor: file_leasehold_v1_leasehold_proto_rawDesc,
			NumEnums:      2,
			NumMessages:   34,
			NumExtensions: 0,
			NumServices:   1,
		},
		GoTypes:           file_leasehold_v1_leasehold_proto_goTypes,
		DependencyIndexes: file_leasehold_v1_leasehold_proto_depIdxs,
		EnumInfos:         file_leasehold_v1_leasehold_proto_enumTypes,
		MessageInfos:      file_leasehold_v1_leasehold_proto_msgTypes,
	}.Build()
	File_leasehold_v1_leasehold_proto = out.File
	file_leasehold_v1_leasehold_proto_rawDesc = nil
	file_leasehold_v1_leasehold_proto_goTypes = nil
	file_leasehold_v1_leasehold_proto_depIdxs = nil
}
