from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class KindUsage(_message.Message):
    __slots__ = ("admitted_messages", "admitted_bytes", "throttled_messages", "throttled_bytes", "limit_messages", "limit_bytes", "quota_messages", "quota_bytes", "shadow_throttled_messages", "shadow_throttled_bytes")
    ADMITTED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    THROTTLED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    THROTTLED_BYTES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUOTA_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    QUOTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHADOW_THROTTLED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SHADOW_THROTTLED_BYTES_FIELD_NUMBER: _ClassVar[int]
    admitted_messages: int
    admitted_bytes: int
    throttled_messages: int
    throttled_bytes: int
    limit_messages: float
    limit_bytes: float
    quota_messages: float
    quota_bytes: float
    shadow_throttled_messages: int
    shadow_throttled_bytes: int
    def __init__(self, admitted_messages: _Optional[int] = ..., admitted_bytes: _Optional[int] = ..., throttled_messages: _Optional[int] = ..., throttled_bytes: _Optional[int] = ..., limit_messages: _Optional[float] = ..., limit_bytes: _Optional[float] = ..., quota_messages: _Optional[float] = ..., quota_bytes: _Optional[float] = ..., shadow_throttled_messages: _Optional[int] = ..., shadow_throttled_bytes: _Optional[int] = ...) -> None: ...

class GroupUsage(_message.Message):
    __slots__ = ("group", "namespaces", "topics", "publish", "dispatch", "replication")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    topics: int
    publish: KindUsage
    dispatch: KindUsage
    replication: KindUsage
    def __init__(self, group: _Optional[str] = ..., namespaces: _Optional[_Iterable[str]] = ..., topics: _Optional[int] = ..., publish: _Optional[_Union[KindUsage, _Mapping]] = ..., dispatch: _Optional[_Union[KindUsage, _Mapping]] = ..., replication: _Optional[_Union[KindUsage, _Mapping]] = ...) -> None: ...

class UsageReport(_message.Message):
    __slots__ = ("daemon_id", "sequence", "publish_time_ms", "tick_ms", "leaving", "groups", "incarnation", "restatement", "group_keys", "members", "complete", "heard", "base", "ack_members", "ack_sequences", "lease_ms", "ack_wanted")
    DAEMON_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    TICK_MS_FIELD_NUMBER: _ClassVar[int]
    LEAVING_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    RESTATEMENT_FIELD_NUMBER: _ClassVar[int]
    GROUP_KEYS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    HEARD_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    ACK_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    ACK_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    ACK_WANTED_FIELD_NUMBER: _ClassVar[int]
    daemon_id: str
    sequence: int
    publish_time_ms: int
    tick_ms: int
    leaving: bool
    groups: _containers.RepeatedCompositeFieldContainer[GroupUsage]
    incarnation: int
    restatement: bool
    group_keys: bytes
    members: int
    complete: bool
    heard: _containers.RepeatedScalarFieldContainer[int]
    base: int
    ack_members: _containers.RepeatedScalarFieldContainer[int]
    ack_sequences: _containers.RepeatedScalarFieldContainer[int]
    lease_ms: int
    ack_wanted: bool
    def __init__(self, daemon_id: _Optional[str] = ..., sequence: _Optional[int] = ..., publish_time_ms: _Optional[int] = ..., tick_ms: _Optional[int] = ..., leaving: _Optional[bool] = ..., groups: _Optional[_Iterable[_Union[GroupUsage, _Mapping]]] = ..., incarnation: _Optional[int] = ..., restatement: _Optional[bool] = ..., group_keys: _Optional[bytes] = ..., members: _Optional[int] = ..., complete: _Optional[bool] = ..., heard: _Optional[_Iterable[int]] = ..., base: _Optional[int] = ..., ack_members: _Optional[_Iterable[int]] = ..., ack_sequences: _Optional[_Iterable[int]] = ..., lease_ms: _Optional[int] = ..., ack_wanted: _Optional[bool] = ...) -> None: ...

class UsageReportEntries(_message.Message):
    __slots__ = ("daemon_id", "sequence", "publish_time_ms", "tick_ms", "leaving", "groups", "incarnation", "restatement", "group_keys", "members", "complete", "heard", "base", "ack_members", "ack_sequences", "lease_ms", "ack_wanted")
    DAEMON_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    TICK_MS_FIELD_NUMBER: _ClassVar[int]
    LEAVING_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    RESTATEMENT_FIELD_NUMBER: _ClassVar[int]
    GROUP_KEYS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    HEARD_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    ACK_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    ACK_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    ACK_WANTED_FIELD_NUMBER: _ClassVar[int]
    daemon_id: str
    sequence: int
    publish_time_ms: int
    tick_ms: int
    leaving: bool
    groups: _containers.RepeatedScalarFieldContainer[bytes]
    incarnation: int
    restatement: bool
    group_keys: bytes
    members: int
    complete: bool
    heard: _containers.RepeatedScalarFieldContainer[int]
    base: int
    ack_members: _containers.RepeatedScalarFieldContainer[int]
    ack_sequences: _containers.RepeatedScalarFieldContainer[int]
    lease_ms: int
    ack_wanted: bool
    def __init__(self, daemon_id: _Optional[str] = ..., sequence: _Optional[int] = ..., publish_time_ms: _Optional[int] = ..., tick_ms: _Optional[int] = ..., leaving: _Optional[bool] = ..., groups: _Optional[_Iterable[bytes]] = ..., incarnation: _Optional[int] = ..., restatement: _Optional[bool] = ..., group_keys: _Optional[bytes] = ..., members: _Optional[int] = ..., complete: _Optional[bool] = ..., heard: _Optional[_Iterable[int]] = ..., base: _Optional[int] = ..., ack_members: _Optional[_Iterable[int]] = ..., ack_sequences: _Optional[_Iterable[int]] = ..., lease_ms: _Optional[int] = ..., ack_wanted: _Optional[bool] = ...) -> None: ...
