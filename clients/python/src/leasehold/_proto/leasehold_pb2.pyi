from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LossReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOSS_REASON_UNSPECIFIED: _ClassVar[LossReason]
    LOSS_REASON_EXPIRED: _ClassVar[LossReason]
    LOSS_REASON_NOT_OWNER: _ClassVar[LossReason]
    LOSS_REASON_STORE_LOST: _ClassVar[LossReason]
    LOSS_REASON_REVOKED: _ClassVar[LossReason]
LOSS_REASON_UNSPECIFIED: LossReason
LOSS_REASON_EXPIRED: LossReason
LOSS_REASON_NOT_OWNER: LossReason
LOSS_REASON_STORE_LOST: LossReason
LOSS_REASON_REVOKED: LossReason

class Lease(_message.Message):
    __slots__ = ("name", "owner_token", "fence", "ttl_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    owner_token: str
    fence: int
    ttl_ms: int
    def __init__(self, name: _Optional[str] = ..., owner_token: _Optional[str] = ..., fence: _Optional[int] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class AcquireRequest(_message.Message):
    __slots__ = ("name", "ttl_ms", "holder", "wait_timeout_ms", "lock_delay_ms", "limit", "keep_place", "place", "ttl_auto")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    KEEP_PLACE_FIELD_NUMBER: _ClassVar[int]
    PLACE_FIELD_NUMBER: _ClassVar[int]
    TTL_AUTO_FIELD_NUMBER: _ClassVar[int]
    name: str
    ttl_ms: int
    holder: str
    wait_timeout_ms: int
    lock_delay_ms: int
    limit: int
    keep_place: bool
    place: str
    ttl_auto: bool
    def __init__(self, name: _Optional[str] = ..., ttl_ms: _Optional[int] = ..., holder: _Optional[str] = ..., wait_timeout_ms: _Optional[int] = ..., lock_delay_ms: _Optional[int] = ..., limit: _Optional[int] = ..., keep_place: bool = ..., place: _Optional[str] = ..., ttl_auto: bool = ...) -> None: ...

class AcquireResponse(_message.Message):
    __slots__ = ("lease", "waited_ms")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    WAITED_MS_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    waited_ms: int
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ..., waited_ms: _Optional[int] = ...) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ("name", "owner_token", "ttl_ms", "ttl_auto")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    TTL_AUTO_FIELD_NUMBER: _ClassVar[int]
    name: str
    owner_token: str
    ttl_ms: int
    ttl_auto: bool
    def __init__(self, name: _Optional[str] = ..., owner_token: _Optional[str] = ..., ttl_ms: _Optional[int] = ..., ttl_auto: bool = ...) -> None: ...

class RenewResponse(_message.Message):
    __slots__ = ("ttl_ms", "fence")
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    ttl_ms: int
    fence: int
    def __init__(self, ttl_ms: _Optional[int] = ..., fence: _Optional[int] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("name", "owner_token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    owner_token: str
    def __init__(self, name: _Optional[str] = ..., owner_token: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeRequest(_message.Message):
    __slots__ = ("name", "tenant")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    name: str
    tenant: str
    def __init__(self, name: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class DescribeResponse(_message.Message):
    __slots__ = ("held", "holder", "fence", "remaining_ms", "ttl_ms", "granted_at_unix_ms", "local_waiters", "lock_delay_ms", "lock_delay_remaining_ms", "waiters", "permits_held")
    HELD_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    GRANTED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_WAITERS_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    PERMITS_HELD_FIELD_NUMBER: _ClassVar[int]
    held: bool
    holder: str
    fence: int
    remaining_ms: int
    ttl_ms: int
    granted_at_unix_ms: int
    local_waiters: int
    lock_delay_ms: int
    lock_delay_remaining_ms: int
    waiters: int
    permits_held: int
    def __init__(self, held: bool = ..., holder: _Optional[str] = ..., fence: _Optional[int] = ..., remaining_ms: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., granted_at_unix_ms: _Optional[int] = ..., local_waiters: _Optional[int] = ..., lock_delay_ms: _Optional[int] = ..., lock_delay_remaining_ms: _Optional[int] = ..., waiters: _Optional[int] = ..., permits_held: _Optional[int] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("prefix", "tenant", "page_size", "page_token")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    tenant: str
    page_size: int
    page_token: str
    def __init__(self, prefix: _Optional[str] = ..., tenant: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("locks", "next_page_token")
    LOCKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    locks: _containers.RepeatedCompositeFieldContainer[ListedLock]
    next_page_token: str
    def __init__(self, locks: _Optional[_Iterable[_Union[ListedLock, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListedLock(_message.Message):
    __slots__ = ("name", "tenant", "held", "holder", "fence", "remaining_ms", "ttl_ms", "granted_at_unix_ms", "waiters", "permits_held", "lock_delay_remaining_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    GRANTED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    PERMITS_HELD_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    tenant: str
    held: bool
    holder: str
    fence: int
    remaining_ms: int
    ttl_ms: int
    granted_at_unix_ms: int
    waiters: int
    permits_held: int
    lock_delay_remaining_ms: int
    def __init__(self, name: _Optional[str] = ..., tenant: _Optional[str] = ..., held: bool = ..., holder: _Optional[str] = ..., fence: _Optional[int] = ..., remaining_ms: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., granted_at_unix_ms: _Optional[int] = ..., waiters: _Optional[int] = ..., permits_held: _Optional[int] = ..., lock_delay_remaining_ms: _Optional[int] = ...) -> None: ...

class CheckFenceRequest(_message.Message):
    __slots__ = ("name", "fence")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    fence: int
    def __init__(self, name: _Optional[str] = ..., fence: _Optional[int] = ...) -> None: ...

class CheckFenceResponse(_message.Message):
    __slots__ = ("current", "current_fence")
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FENCE_FIELD_NUMBER: _ClassVar[int]
    current: bool
    current_fence: int
    def __init__(self, current: bool = ..., current_fence: _Optional[int] = ...) -> None: ...

class RevokeRequest(_message.Message):
    __slots__ = ("name", "tenant")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    name: str
    tenant: str
    def __init__(self, name: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class RevokeResponse(_message.Message):
    __slots__ = ("fence",)
    FENCE_FIELD_NUMBER: _ClassVar[int]
    fence: int
    def __init__(self, fence: _Optional[int] = ...) -> None: ...

class KeepAliveRequest(_message.Message):
    __slots__ = ("seq", "leases", "last_round_trip_us")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    LAST_ROUND_TRIP_US_FIELD_NUMBER: _ClassVar[int]
    seq: int
    leases: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    last_round_trip_us: int
    def __init__(self, seq: _Optional[int] = ..., leases: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ..., last_round_trip_us: _Optional[int] = ...) -> None: ...

class LeaseRef(_message.Message):
    __slots__ = ("name", "owner_token", "ttl_ms", "ttl_auto")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    TTL_AUTO_FIELD_NUMBER: _ClassVar[int]
    name: str
    owner_token: str
    ttl_ms: int
    ttl_auto: bool
    def __init__(self, name: _Optional[str] = ..., owner_token: _Optional[str] = ..., ttl_ms: _Optional[int] = ..., ttl_auto: bool = ...) -> None: ...

class KeepAliveResponse(_message.Message):
    __slots__ = ("seq", "leases", "advice")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    ADVICE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    leases: _containers.RepeatedCompositeFieldContainer[LeaseStatus]
    advice: TtlAdvice
    def __init__(self, seq: _Optional[int] = ..., leases: _Optional[_Iterable[_Union[LeaseStatus, _Mapping]]] = ..., advice: _Optional[_Union[TtlAdvice, _Mapping]] = ...) -> None: ...

class TtlAdvice(_message.Message):
    __slots__ = ("round_trip_p99_us", "shortest_ttl_ms", "suggested_ttl_ms", "leases_below", "message")
    ROUND_TRIP_P99_US_FIELD_NUMBER: _ClassVar[int]
    SHORTEST_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    SUGGESTED_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    LEASES_BELOW_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    round_trip_p99_us: int
    shortest_ttl_ms: int
    suggested_ttl_ms: int
    leases_below: int
    message: str
    def __init__(self, round_trip_p99_us: _Optional[int] = ..., shortest_ttl_ms: _Optional[int] = ..., suggested_ttl_ms: _Optional[int] = ..., leases_below: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class LeaseStatus(_message.Message):
    __slots__ = ("name", "state", "ttl_ms", "fence", "reason", "message")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[LeaseStatus.State]
        STATE_ALIVE: _ClassVar[LeaseStatus.State]
        STATE_LOST: _ClassVar[LeaseStatus.State]
        STATE_UNCONFIRMED: _ClassVar[LeaseStatus.State]
        STATE_REJECTED: _ClassVar[LeaseStatus.State]
    STATE_UNSPECIFIED: LeaseStatus.State
    STATE_ALIVE: LeaseStatus.State
    STATE_LOST: LeaseStatus.State
    STATE_UNCONFIRMED: LeaseStatus.State
    STATE_REJECTED: LeaseStatus.State
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: LeaseStatus.State
    ttl_ms: int
    fence: int
    reason: LossReason
    message: str
    def __init__(self, name: _Optional[str] = ..., state: _Optional[_Union[LeaseStatus.State, str]] = ..., ttl_ms: _Optional[int] = ..., fence: _Optional[int] = ..., reason: _Optional[_Union[LossReason, str]] = ..., message: _Optional[str] = ...) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ("id", "timeout_ms", "acquire", "renew", "release", "heartbeat", "cancel")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    RENEW_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    id: int
    timeout_ms: int
    acquire: AcquireRequest
    renew: RenewRequest
    release: ReleaseRequest
    heartbeat: KeepAliveRequest
    cancel: SessionCancel
    def __init__(self, id: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., acquire: _Optional[_Union[AcquireRequest, _Mapping]] = ..., renew: _Optional[_Union[RenewRequest, _Mapping]] = ..., release: _Optional[_Union[ReleaseRequest, _Mapping]] = ..., heartbeat: _Optional[_Union[KeepAliveRequest, _Mapping]] = ..., cancel: _Optional[_Union[SessionCancel, _Mapping]] = ...) -> None: ...

class SessionCancel(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class SessionResponse(_message.Message):
    __slots__ = ("id", "acquire", "renew", "release", "heartbeat", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    RENEW_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: int
    acquire: AcquireResponse
    renew: RenewResponse
    release: ReleaseResponse
    heartbeat: KeepAliveResponse
    error: SessionError
    def __init__(self, id: _Optional[int] = ..., acquire: _Optional[_Union[AcquireResponse, _Mapping]] = ..., renew: _Optional[_Union[RenewResponse, _Mapping]] = ..., release: _Optional[_Union[ReleaseResponse, _Mapping]] = ..., heartbeat: _Optional[_Union[KeepAliveResponse, _Mapping]] = ..., error: _Optional[_Union[SessionError, _Mapping]] = ...) -> None: ...

class SessionError(_message.Message):
    __slots__ = ("code", "message", "place", "reason", "metadata", "retry_delay_ms")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PLACE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    place: str
    reason: str
    metadata: _containers.ScalarMap[str, str]
    retry_delay_ms: int
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., place: _Optional[str] = ..., reason: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., retry_delay_ms: _Optional[int] = ...) -> None: ...

class CampaignRequest(_message.Message):
    __slots__ = ("election", "value", "ttl_ms", "wait_timeout_ms", "keep_place", "place")
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    KEEP_PLACE_FIELD_NUMBER: _ClassVar[int]
    PLACE_FIELD_NUMBER: _ClassVar[int]
    election: str
    value: str
    ttl_ms: int
    wait_timeout_ms: int
    keep_place: bool
    place: str
    def __init__(self, election: _Optional[str] = ..., value: _Optional[str] = ..., ttl_ms: _Optional[int] = ..., wait_timeout_ms: _Optional[int] = ..., keep_place: bool = ..., place: _Optional[str] = ...) -> None: ...

class CampaignResponse(_message.Message):
    __slots__ = ("lease", "waited_ms")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    WAITED_MS_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    waited_ms: int
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ..., waited_ms: _Optional[int] = ...) -> None: ...

class LeaderRequest(_message.Message):
    __slots__ = ("election",)
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    election: str
    def __init__(self, election: _Optional[str] = ...) -> None: ...

class LeaderResponse(_message.Message):
    __slots__ = ("present", "value", "term", "remaining_ms")
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    present: bool
    value: str
    term: int
    remaining_ms: int
    def __init__(self, present: bool = ..., value: _Optional[str] = ..., term: _Optional[int] = ..., remaining_ms: _Optional[int] = ...) -> None: ...

class ObserveRequest(_message.Message):
    __slots__ = ("election",)
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    election: str
    def __init__(self, election: _Optional[str] = ...) -> None: ...

class ObserveResponse(_message.Message):
    __slots__ = ("present", "value", "term", "remaining_ms")
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    present: bool
    value: str
    term: int
    remaining_ms: int
    def __init__(self, present: bool = ..., value: _Optional[str] = ..., term: _Optional[int] = ..., remaining_ms: _Optional[int] = ...) -> None: ...

class ResignRequest(_message.Message):
    __slots__ = ("election", "owner_token")
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    OWNER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    election: str
    owner_token: str
    def __init__(self, election: _Optional[str] = ..., owner_token: _Optional[str] = ...) -> None: ...

class ResignResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
