"""The group-describe protocol messages kafka-python 3.0.12 lacks, defined once.

Why: KIP-848 ConsumerGroupDescribe (api key 69), KIP-932 ShareGroupDescribe (77) and KIP-1071
StreamsGroupDescribe (89) share one request and one response shape (a list of described
groups with error, state, epochs and members); only the members and a few group fields
differ. The schemas follow Apache Kafka's
``clients/src/main/resources/common/message/<Name>{Request,Response}.json`` with the common
structs inlined, built by one function so that shared shape is written once, and encoded and
decoded by kafka-python's own message machinery.
"""

from __future__ import annotations

import copy
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.data_container import SlotsBuilder
from kafka.protocol.schemas import StructField

Field = dict[str, Any]


class _InlineSchemaMessage(type(ApiMessage)):  # type: ignore[misc]
    """ApiMessage metaclass taking the JSON schema inline (``_schema``) instead of loading
    ``<ClassName>.json`` from kafka-python's package resources."""

    def __new__(mcls, name, bases, attrs, **kw):
        schema = attrs.pop("_schema", None)
        if schema is None:
            return super().__new__(mcls, name, bases, attrs, **kw)
        attrs["_json"] = copy.deepcopy(schema)
        attrs["_struct"] = StructField(attrs["_json"])
        attrs["__license__"] = None
        return SlotsBuilder.__new__(mcls, name, bases, attrs)


def _field(name: str, type_: str, versions: str, **extra: Any) -> Field:
    return {"name": name, "type": type_, "versions": versions, **extra}


def _nullable(name: str, versions: str) -> Field:
    """A nullable string defaulting to null (ErrorMessage, InstanceId, RackId, ...)."""
    return _field(name, "string", versions, nullableVersions=versions, default="null")


def _struct_list(name: str, type_: str, versions: str, fields: list[Field]) -> Field:
    return _field(name, f"[]{type_}", versions, fields=fields)


def _topic_partitions(v: str) -> Field:
    return _struct_list("TopicPartitions", "TopicPartitions", v, [
        _field("TopicId", "uuid", v), _field("TopicName", "string", v),
        _field("Partitions", "[]int32", v)])


def _assignment(v: str) -> Field:
    """A consumer/share member's (target) assignment: topic partitions by id and name."""
    return _field("Assignment", "Assignment", v, fields=[_topic_partitions(v)])


def describe_request(api_key: int, name: str, valid: str, v: str) -> dict[str, Any]:
    """``<name>Request``: group ids and whether to include authorized operations."""
    return {"apiKey": api_key, "type": "request", "name": f"{name}Request",
            "validVersions": valid, "flexibleVersions": v, "fields": [
                _field("GroupIds", "[]string", v),
                _field("IncludeAuthorizedOperations", "bool", v)]}


def describe_response(api_key: int, name: str, valid: str, v: str, *, group_fields: list[Field],
                      member_fields: list[Field]) -> dict[str, Any]:
    """``<name>Response``: the described groups' common fields around the API's own."""
    return {"apiKey": api_key, "type": "response", "name": f"{name}Response",
            "validVersions": valid, "flexibleVersions": v, "fields": [
                _field("ThrottleTimeMs", "int32", v),
                _struct_list("Groups", "DescribedGroup", v, [
                    _field("ErrorCode", "int16", v), _nullable("ErrorMessage", v),
                    _field("GroupId", "string", v), _field("GroupState", "string", v),
                    _field("GroupEpoch", "int32", v), _field("AssignmentEpoch", "int32", v),
                    *group_fields,
                    _struct_list("Members", "Member", v, member_fields),
                    _field("AuthorizedOperations", "int32", v, default="-2147483648"),
                ])]}


# ConsumerGroupDescribe: v0 (KIP-848), v1 adds Member.MemberType (KIP-1099).
_CGD = (69, "ConsumerGroupDescribe", "0-1", "0+")
CGD_REQUEST_SCHEMA = describe_request(*_CGD)
CGD_RESPONSE_SCHEMA = describe_response(
    *_CGD, group_fields=[_field("AssignorName", "string", "0+")], member_fields=[
        _field("MemberId", "string", "0+"), _nullable("InstanceId", "0+"),
        _nullable("RackId", "0+"), _field("MemberEpoch", "int32", "0+"),
        _field("ClientId", "string", "0+"), _field("ClientHost", "string", "0+"),
        _field("SubscribedTopicNames", "[]string", "0+"), _nullable("SubscribedTopicRegex", "0+"),
        _assignment("0+"), {**_assignment("0+"), "name": "TargetAssignment"},
        _field("MemberType", "int8", "1+", default="-1", ignorable=True)])

# ShareGroupDescribe: v1 is the first stable version (4.1+; v0 was 4.0's early access and was
# removed), so only v1 is spoken.
_SGD = (77, "ShareGroupDescribe", "1", "1+")
SGD_REQUEST_SCHEMA = describe_request(*_SGD)
SGD_RESPONSE_SCHEMA = describe_response(
    *_SGD, group_fields=[_field("AssignorName", "string", "1+")], member_fields=[
        _field("MemberId", "string", "1+"), _nullable("RackId", "1+"),
        _field("MemberEpoch", "int32", "1+"), _field("ClientId", "string", "1+"),
        _field("ClientHost", "string", "1+"), _field("SubscribedTopicNames", "[]string", "1+"),
        _assignment("1+")])


def _key_values(name: str) -> Field:
    return _struct_list(name, "KeyValue", "0+", [
        _field("Key", "string", "0+"), _field("Value", "string", "0+")])


def _topic_infos(name: str) -> Field:
    return _struct_list(name, "TopicInfo", "0+", [
        _field("Name", "string", "0+"), _field("Partitions", "int32", "0+"),
        _field("ReplicationFactor", "int16", "0+"), _key_values("TopicConfigs")])


def _task_offsets(name: str) -> Field:
    return _struct_list(name, "TaskOffset", "0+", [
        _field("Subtopology", "string", "0+"), _field("Partition", "int32", "0+"),
        _field("Offset", "int64", "0+")])


def _streams_assignment(name: str) -> Field:
    def tasks(kind: str) -> Field:
        return _struct_list(kind, "TaskIds", "0+", [
            _field("Subtopology", "string", "0+"), _field("Partitions", "[]int32", "0+")])
    return _field(name, "Assignment", "0+",
                  fields=[tasks("ActiveTasks"), tasks("StandbyTasks"), tasks("WarmupTasks")])


# StreamsGroupDescribe: v0 (v1 adds IncludeTopologyDescription, KIP-1331, not spoken here).
_STGD = (89, "StreamsGroupDescribe", "0", "0+")
STGD_REQUEST_SCHEMA = describe_request(*_STGD)
STGD_RESPONSE_SCHEMA = describe_response(
    *_STGD, group_fields=[
        _field("Topology", "[]Subtopology", "0+", nullableVersions="0+", default="null",
               fields=[_field("SubtopologyId", "string", "0+"),
                       _field("SourceTopics", "[]string", "0+"),
                       _field("SourceTopicRegex", "[]string", "0+"),
                       _topic_infos("StateChangelogTopics"),
                       _field("RepartitionSinkTopics", "[]string", "0+"),
                       _topic_infos("RepartitionSourceTopics")])],
    member_fields=[
        _field("MemberId", "string", "0+"), _field("MemberEpoch", "int32", "0+"),
        _nullable("InstanceId", "0+"), _nullable("RackId", "0+"),
        _field("ClientId", "string", "0+"), _field("ClientHost", "string", "0+"),
        _field("TopologyId", "string", "0+"), _field("ProcessId", "string", "0+"),
        _key_values("ClientTags"), _task_offsets("TaskOffsets"),
        _task_offsets("TaskEndOffsets"), _streams_assignment("Assignment"),
        _streams_assignment("TargetAssignment")])

try:  # a later kafka-python may ship these; prefer its classes then
    from kafka.protocol.admin import (  # type: ignore[attr-defined]
        ConsumerGroupDescribeRequest,
        ConsumerGroupDescribeResponse,
    )
except ImportError:

    class ConsumerGroupDescribeRequest(ApiMessage, metaclass=_InlineSchemaMessage):  # type: ignore[no-redef]
        _schema = CGD_REQUEST_SCHEMA

    class ConsumerGroupDescribeResponse(ApiMessage, metaclass=_InlineSchemaMessage):  # type: ignore[no-redef]
        _schema = CGD_RESPONSE_SCHEMA


class ShareGroupDescribeRequest(ApiMessage, metaclass=_InlineSchemaMessage):  # type: ignore[misc]
    _schema = SGD_REQUEST_SCHEMA


class ShareGroupDescribeResponse(ApiMessage, metaclass=_InlineSchemaMessage):  # type: ignore[misc]
    _schema = SGD_RESPONSE_SCHEMA


class StreamsGroupDescribeRequest(ApiMessage, metaclass=_InlineSchemaMessage):  # type: ignore[misc]
    _schema = STGD_REQUEST_SCHEMA


class StreamsGroupDescribeResponse(ApiMessage, metaclass=_InlineSchemaMessage):  # type: ignore[misc]
    _schema = STGD_RESPONSE_SCHEMA
