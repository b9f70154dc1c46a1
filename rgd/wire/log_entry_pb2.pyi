from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LogEntryMetadata(_message.Message):
    __slots__ = ("kind", "write_time_us", "daemon_id", "log_index", "receive_time_us", "publisher_id", "publisher_sequence", "publisher_incarnation", "publish_time_ms", "payload_kept", "accounted", "cumulative_admitted_messages", "cumulative_admitted_bytes", "cumulative_throttled_messages", "cumulative_throttled_bytes", "final")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[LogEntryMetadata.Kind]
        PUBLISHED: _ClassVar[LogEntryMetadata.Kind]
        RECEIPT: _ClassVar[LogEntryMetadata.Kind]
        ACCOUNTING: _ClassVar[LogEntryMetadata.Kind]
    KIND_UNSPECIFIED: LogEntryMetadata.Kind
    PUBLISHED: LogEntryMetadata.Kind
    RECEIPT: LogEntryMetadata.Kind
    ACCOUNTING: LogEntryMetadata.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    WRITE_TIME_US_FIELD_NUMBER: _ClassVar[int]
    DAEMON_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    RECEIVE_TIME_US_FIELD_NUMBER: _ClassVar[int]
    PUBLISHER_ID_FIELD_NUMBER: _ClassVar[int]
    PUBLISHER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PUBLISHER_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_KEPT_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTED_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_ADMITTED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_ADMITTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_THROTTLED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_THROTTLED_BYTES_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    kind: LogEntryMetadata.Kind
    write_time_us: int
    daemon_id: str
    log_index: int
    receive_time_us: int
    publisher_id: str
    publisher_sequence: int
    publisher_incarnation: int
    publish_time_ms: int
    payload_kept: bool
    accounted: bool
    cumulative_admitted_messages: int
    cumulative_admitted_bytes: int
    cumulative_throttled_messages: int
    cumulative_throttled_bytes: int
    final: bool
    def __init__(self, kind: _Optional[_Union[LogEntryMetadata.Kind, str]] = ..., write_time_us: _Optional[int] = ..., daemon_id: _Optional[str] = ..., log_index: _Optional[int] = ..., receive_time_us: _Optional[int] = ..., publisher_id: _Optional[str] = ..., publisher_sequence: _Optional[int] = ..., publisher_incarnation: _Optional[int] = ..., publish_time_ms: _Optional[int] = ..., payload_kept: _Optional[bool] = ..., accounted: _Optional[bool] = ..., cumulative_admitted_messages: _Optional[int] = ..., cumulative_admitted_bytes: _Optional[int] = ..., cumulative_throttled_messages: _Optional[int] = ..., cumulative_throttled_bytes: _Optional[int] = ..., final: _Optional[bool] = ...) -> None: ...
