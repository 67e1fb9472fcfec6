"""Every patch of moto's private internals, in one place (moto is pinned exactly).

- ``LambdaFunction._invoke_lambda`` -> the function's execution environments
  (``ACTIVE.invoker``: ``local_aws.environments``);
- the endpoint moto's Step Functions interpreter calls Lambda on -> the runtime's
  (``ACTIVE.port``; moto reads ``MOTO_PORT`` from the process environment otherwise);
- ``WaitFunction._wait_interval`` and the ``time`` of the Step Functions retrier -> the
  virtual clock (``local_aws.clock``); a Retry interval, like a Wait, ends when its execution
  stops (:class:`_RetryTime`);
- SES v2 ``SendEmail`` and the operations moto lacks (``GetAccount``, configuration set
  event destinations) -> the local SES (``local_aws.ses``);
- SQS queues stop invoking mapped functions inline; ``SqsPoller`` does it like Lambda does;
- Step Functions ``StopExecution`` keeps its ``error`` and ``cause`` (:func:`_stop_execution`),
  and a stopped execution stays stopped: a state that fails while the stop lands does not turn
  it FAILED (:func:`_set_error`);
- DynamoDB ``TransactWriteItems`` rolls back only the items it wrote (see
  :func:`transact_write_items`);
- a DynamoDB Query on a table's own key reads only its partition, and one on an index only the
  items holding the index key's value (:func:`partition_query`);
- a callback Task (``.waitForTaskToken``) waits for its token only while its execution runs:
  moto's waits until the token comes back even after StopExecution, so a stopped execution stayed
  RUNNING; AWS ends it at once (:func:`_eval_wait_for_task_token`);
- moto's DynamoDB reads cost what they read: a string's value without five type checks, a
  Scan's items sorted by their keys' plain values (:func:`faster_dynamodb_reads`);
- EventBridge Scheduler's CreateSchedule, UpdateSchedule and DeleteSchedule also tell the
  runtime's one-time schedules (``ACTIVE.schedules``: ``local_aws.scheduler``), which moto only
  stores.

:func:`self_check` fails loudly when one of these hooks moved (a moto upgrade): the
runtime calls it before patching, and a test calls it too.
"""

from __future__ import annotations

import base64
import bisect
import copy
import functools
import inspect
import io
import itertools
import json
import socket
import threading
import time as _time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from moto import backends as moto_backends
from moto.awslambda.models import LambdaBackend, LambdaFunction
from moto.core import responses as moto_responses
from moto.core.common_types import TYPE_RESPONSE
from moto.core.exceptions import JsonRESTError
from moto.core.utils import iso_8601_datetime_with_milliseconds, unix_time, unix_time_millis
from moto.dynamodb import models as dynamodb_models
from moto.dynamodb.comparisons import get_comparison_func, get_filter_expression
from moto.dynamodb.exceptions import (
    ConditionalCheckFailed,
    MockValidationException,
    MultipleTransactionsException,
    TooManyTransactionsException,
    TransactionCanceledException,
    TransactWriteSingleOpException,
)
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import StreamRecord, StreamShard
from moto.dynamodb.responses import DynamoHandler, DynamoResult
from moto.moto_server.werkzeug_app import MotoRequestHandler
from moto.scheduler.models import EventBridgeSchedulerBackend
from moto.sesv2 import urls as sesv2_urls
from moto.sesv2.responses import SESV2Response
from moto.sns.models import Subscription as SnsSubscription
from moto.sqs.models import Message as SqsMessage
from moto.sqs.models import Queue, SQSBackend
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service_callback as sfn_callback,
)
from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction
from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackOutcomeSuccess
from moto.stepfunctions.parser.asl.eval.environment import Environment as SfnEnvironment
from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped
from moto.stepfunctions.parser.asl.utils import boto_client as sfn_boto_client
from moto.stepfunctions.responses import StepFunctionResponse
from moto.utilities.utils import md5_hash

from local_aws.clock import VirtualClock
from local_aws.scheduler import OneTimeSchedules
from local_aws.ses import LocalSes, SesError

MOTO_VERSION = "5.2.5"


class HookDrift(RuntimeError):
    """moto's private hooks are not where the local runtime expects them."""


SqsMappingHandler = Callable[[Any, Any], None]  # (event source mapping, moto queue)
StreamMappingHandler = Callable[[Any, Any], None]  # (event source mapping, moto table)
Invoker = Callable[[Any, Any], tuple[str, bool, str]]  # (moto LambdaFunction, event) -> result


@dataclass
class _Active:
    clock: VirtualClock | None = None
    ses: LocalSes | None = None
    on_sqs_mapping: SqsMappingHandler | None = None
    on_stream_mapping: StreamMappingHandler | None = None
    invoker: Invoker | None = None
    port: int | None = None  # the embedded endpoint's port
    schedules: OneTimeSchedules | None = None  # fires EventBridge Scheduler's one-time schedules


ACTIVE = _Active()
_installed = False
_install_lock = threading.Lock()


def _source_problems() -> list[str]:
    """What the patches below rely on in moto's own code (its source text)."""
    relied_on: list[tuple[Any, str, str]] = [
        (sfn_boto_client.boto_client_for, "moto_server_port()",
         "the Step Functions interpreter no longer finds moto's port through moto_server_port"),
        (_MOTO_TRANSACT_WRITE_ITEMS, "original_table_state",
         "DynamoDB transact_write_items no longer snapshots whole tables: review the override"),
        (moto_responses.BaseResponse.call_action, "in method_names",
         "moto's call_action no longer only tests the action against method_names_from_class"),
        (_MOTO_CAST_VALUE, "else:\n            return self.value",
         "DynamoType.cast_value no longer returns a plain value as it is: review _cast_value"),
        (_MOTO_TABLE_SCAN, "items = self.all_items()",
         "DynamoDB Table.scan no longer walks all_items: review start_key_scan"),
        (Item.is_within_segment, "md5_hash(self.hash_key.value.encode(\"utf8\")).digest()[0]",
         "moto's scan segments no longer hash the hash key's first MD5 byte: review _segment_hash"),
        (_MOTO_ALL_ITEMS, "(x.hash_key, x.range_key) if x.range_key else x.hash_key",
         "DynamoDB Table.all_items no longer sorts by the key: review _key_sorted_items"),
        (_MOTO_TABLE_QUERY, "item.hash_key == hash_key",
         "DynamoDB Table.query no longer keeps a partition's items of all_items"),
    ]  # fmt: skip
    return [problem for code, needle, problem in relied_on if needle not in inspect.getsource(code)]


def self_check() -> None:
    import moto

    problems = []
    if moto.__version__ != MOTO_VERSION:
        problems.append(f"moto {moto.__version__} installed, the local runtime is built for {MOTO_VERSION}")
    expected = {
        (LambdaFunction, "_invoke_lambda"): ["self", "event"],
        (LambdaFunction, "invoke"): ["self", "body", "request_headers", "response_headers"],
        (DynamoHandler, "serialized"): ["self", "action_result"],
        (WaitFunction, "_wait_interval"): ["self", "env", "wait_seconds"],
        (retrier_decl.RetrierDecl, "_eval_body"): ["self", "env"],
        (SfnEnvironment, "set_error"): ["self", "error"],
        (SESV2Response, "send_email"): ["self"],
        (SESV2Response, "dispatch"): None,
        (SESV2Response, "get_configuration_set"): ["self"],
        (LambdaBackend, "create_event_source_mapping"): ["self", "spec"],
        (dynamodb_models.DynamoDBBackend, "transact_write_items"): ["self", "transact_items"],
        (dynamodb_models.Table, "all_items"): ["self"],
        (StreamShard, "add"): ["self", "old", "new"],
        (StreamRecord, "__init__"): ["self", "table", "stream_type", "event_name", "old", "new", "seq"],
        (SqsMessage, "delay"): ["self", "delay_seconds"],
        (StepFunctionResponse, "stop_execution"): ["self"],
        (EventBridgeSchedulerBackend, "delete_schedule"): ["self", "group_name", "name"],
        (sfn_callback.StateTaskServiceCallback, "_eval_wait_for_task_token"): [
            "self",
            "env",
            "timeout_seconds",
            "callback_endpoint",
            "heartbeat_endpoint",
        ],
        (EventBridgeSchedulerBackend, "create_schedule"): None,
        (EventBridgeSchedulerBackend, "update_schedule"): None,
    }
    for (owner, name), params in expected.items():
        member = getattr(owner, name, None)
        if member is None:
            problems.append(f"{owner.__module__}.{owner.__name__}.{name} is missing")
            continue
        if params is not None and list(inspect.signature(member).parameters) != params:
            problems.append(f"{owner.__name__}.{name} signature changed: {inspect.signature(member)}")
    if not hasattr(retrier_decl, "time") or "time.sleep(" not in inspect.getsource(retrier_decl):
        problems.append("the Step Functions retrier no longer sleeps through retrier_decl.time")
    problems += _source_problems()
    if not isinstance(getattr(sesv2_urls, "url_paths", None), dict):
        problems.append("moto.sesv2.urls.url_paths is no longer a dict")
    for (owner, name), source in _SQS_CLOCK.items():
        member = _MOTO_SQS_PROPERTIES[owner, name]
        if not isinstance(member, property) or source not in inspect.getsource(member.fget):  # type: ignore[arg-type]
            problems.append(f"SQS {owner.__name__}.{name} no longer reads {source!r}: review _sqs_counts")
    if "lambda_event_source_mappings" not in inspect.getsource(Queue.add_message):
        problems.append("SQS Queue.add_message no longer triggers event source mappings")
    from moto.stepfunctions import responses as sfn_responses

    if not callable(getattr(sfn_responses, "get_backend", None)):  # read by the EventBridge watcher
        problems.append("moto.stepfunctions.responses.get_backend is missing")
    if problems:
        raise HookDrift("local runtime hooks drifted from moto: " + "; ".join(problems))


class _RetryTime(types.SimpleNamespace):
    """Stands in for the ``time`` module inside the retrier: sleeps on the virtual clock, and
    ends early when the execution whose Retry interval it is stops (:func:`_retrier_eval_body`
    names it): Step Functions ends a stopped execution at once, moto only after the interval,
    which a paused clock never ends."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        clock = ACTIVE.clock
        if clock is None:
            _time.sleep(seconds)
            return
        env = getattr(_RETRYING, "env", None)
        if env is None:
            clock.sleep(seconds)
        else:
            clock.wait(seconds, env.program_state_event, running=env.is_running)


_RETRYING = threading.local()  # the execution whose Retry interval this thread is evaluating
_MOTO_RETRIER_EVAL_BODY = retrier_decl.RetrierDecl._eval_body


def _retrier_eval_body(self: Any, env: Any) -> None:
    """moto's Retrier, its execution named for the interval's sleep (:class:`_RetryTime`)."""
    _RETRYING.env = env
    try:
        _MOTO_RETRIER_EVAL_BODY(self, env)
    finally:
        _RETRYING.env = None


_MOTO_SET_ERROR = SfnEnvironment.set_error


def _set_error(self: Any, error: Any) -> None:
    """moto's ``Environment.set_error``, except on a stopped execution. A Task that fails while
    StopExecution lands (its function found the subscriber's pair gone: the stop's own cleanup)
    finds its Retry and Catch skipped (they evaluate only while the execution runs), and moto
    then replaced the stop with the Task's error: the execution ended FAILED. On Step Functions a
    stopped execution ends ABORTED (API Reference, StopExecution)."""
    with self._state_mutex:  # an RLock: moto's set_error takes it again
        if isinstance(self._program_state, ProgramStopped):
            return
        _MOTO_SET_ERROR(self, error)


def _wait_interval(self: Any, env: Any, wait_seconds: int) -> None:
    clock = ACTIVE.clock
    if clock is None:
        env.program_state_event.wait(wait_seconds)
        return
    clock.wait(wait_seconds, env.program_state_event, running=env.is_running)


def _invoke_lambda(self: Any, event: Any = None) -> tuple[str, bool, str]:
    invoker = ACTIVE.invoker
    if invoker is None:
        raise JsonRESTError("ServiceException", "the local runtime's execution environments are not running")
    return invoker(self, event)


_MOTO_SERVER_PORT = sfn_boto_client.moto_server_port


def _moto_server_port() -> str:
    """The port the Step Functions interpreter's clients call (a Lambda task's Invoke)."""
    return str(ACTIVE.port) if ACTIVE.port is not None else _MOTO_SERVER_PORT()


def _ses_error(exc: SesError) -> JsonRESTError:
    error = JsonRESTError(exc.error_type, exc.message)
    error.code = exc.status
    return error


def _require_ses() -> LocalSes:
    if ACTIVE.ses is None:
        raise JsonRESTError("ServiceUnavailable", "the local SES is not running")
    return ACTIVE.ses


def _send_email(self: Any) -> str:
    ses = _require_ses()
    backend = self.sesv2_backend

    def exists(name: str) -> bool:
        try:
            backend.get_configuration_set(configuration_set_name=name)
        except Exception:
            return False
        return True

    def verified(identity: str) -> bool:
        """The account's identities (SES v2 CreateEmailIdentity; the local SES verifies at once)."""
        return identity in {name.lower() for name in backend.core_backend.email_identities}

    try:
        sent = ses.send(json.loads(self.body or "{}"), exists, verified)
    except SesError as exc:
        raise _ses_error(exc) from None
    return json.dumps({"MessageId": sent.message_id})


def _get_account(self: Any) -> str:
    return json.dumps(_require_ses().account())


def _existing_configuration_set(self: Any) -> str:
    """The request's ``ConfigurationSetName``, refused as SES does when no such set exists."""
    name = str(self._get_param("ConfigurationSetName"))
    try:
        self.sesv2_backend.get_configuration_set(configuration_set_name=name)
    except Exception:
        raise _ses_error(
            SesError("NotFoundException", f"Configuration set <{name}> does not exist.", 404)
        ) from None
    return name


def _create_event_destination(self: Any) -> str:
    ses = _require_ses()
    name = _existing_configuration_set(self)
    ses.put_destination(
        name, self._get_param("EventDestinationName"), self._get_param("EventDestination") or {}
    )
    return json.dumps({})


def _update_event_destination(self: Any) -> str:
    return _create_event_destination(self)


def _put_sending_options(self: Any) -> str:
    """SES v2 PutConfigurationSetSendingOptions (moto lacks it): the local SES refuses sends
    through a disabled set (``local_aws.ses``)."""
    ses = _require_ses()
    name = _existing_configuration_set(self)
    ses.set_sending(name, bool(self._get_param("SendingEnabled", False)))
    return json.dumps({})


_MOTO_GET_CONFIGURATION_SET = SESV2Response.get_configuration_set
_MOTO_GET_EMAIL_IDENTITY = SESV2Response.get_email_identity


def _get_email_identity(self: Any) -> str:
    """moto's answer with the local SES's verification: an identity waiting for verification
    (`mailstep dev --identity-pending`) is ``VerifiedForSendingStatus`` false with DKIM
    ``PENDING``; any other is verified with DKIM ``SUCCESS`` (the local SES verifies at once)."""
    answer = json.loads(_MOTO_GET_EMAIL_IDENTITY(self))
    ses = ACTIVE.ses
    if ses is not None:
        name = str(self._get_param("EmailIdentity"))
        pending = ses.identity_pending(name)
        answer["VerifiedForSendingStatus"] = not pending
        answer["VerificationStatus"] = "PENDING" if pending else "SUCCESS"
        dkim = answer.setdefault("DkimAttributes", {})
        dkim.update({"SigningEnabled": True, "Status": "PENDING" if pending else "SUCCESS"})
        dkim.setdefault("Tokens", [f"local{i}{name.replace('.', '')[:20]}" for i in range(1, 4)])
        dkim.setdefault("SigningAttributesOrigin", "AWS_SES")
    return json.dumps(answer)


def _get_configuration_set(self: Any) -> str:
    """moto's answer with the sending state the local SES holds (moto nests its own flag
    wrongly: ``{"SendingEnabled": {...}}``) and the set's ``LastFreshStart``."""
    answer = json.loads(_MOTO_GET_CONFIGURATION_SET(self))
    ses = ACTIVE.ses
    if ses is not None:
        name = answer.get("ConfigurationSetName") or self._get_param("ConfigurationSetName")
        answer["SendingOptions"] = {"SendingEnabled": ses.sending_enabled(name)}
        fresh = ses.fresh_starts.get(name)
        if fresh:
            answer.setdefault("ReputationOptions", {})["LastFreshStart"] = fresh
    return json.dumps(answer)


def _get_event_destinations(self: Any) -> str:
    ses = _require_ses()
    return json.dumps({"EventDestinations": ses.list_destinations(self._get_param("ConfigurationSetName"))})


def _delete_event_destination(self: Any) -> str:
    ses = _require_ses()
    try:
        ses.delete_destination(
            self._get_param("ConfigurationSetName"), self._get_param("EventDestinationName")
        )
    except SesError as exc:
        raise _ses_error(exc) from None
    return json.dumps({})


_original_create_mapping = LambdaBackend.create_event_source_mapping


def _create_event_source_mapping(self: Any, spec: dict[str, Any]) -> Any:
    """Create the mapping as moto does, then hand SQS and DynamoDB stream mappings to the
    runtime's pollers."""
    from moto.sqs.models import sqs_backends

    esm = _original_create_mapping(self, spec)
    for queue in sqs_backends[self.account_id][self.region_name].queues.values():
        if queue.queue_arn == esm.event_source_arn and ACTIVE.on_sqs_mapping is not None:
            detach_inline_event_sources(queue)
            ACTIVE.on_sqs_mapping(esm, queue)
    for table in dynamodb_models.dynamodb_backends[self.account_id][self.region_name].tables.values():
        if table.lambda_event_source_mappings.get(esm.function_arn) is esm and ACTIVE.on_stream_mapping:
            del table.lambda_event_source_mappings[esm.function_arn]  # moto would invoke it inline
            ACTIVE.on_stream_mapping(esm, table)
    return esm


_STREAMS = threading.Lock()
STREAM_LOCK = _STREAMS  # held while a stream's records are appended, read or forgotten (local_aws.streams)


def _stream_add(self: Any, old: Any, new: Any) -> None:
    """Record one change in the table's stream as moto does, without moto's inline invocation of
    the mapped functions (from inside the writer's request, with the whole shard): the runtime's
    stream pollers (``local_aws.streams``) hand the records to them, as Lambda polls a stream."""
    stream_type = self.table.stream_specification["StreamViewType"]
    event_name = "INSERT" if old is None else "REMOVE" if new is None else "MODIFY"
    with _STREAMS:
        seq = len(self.items) + self.starting_sequence_number
        self.items.append(StreamRecord(self.table, stream_type, event_name, old, new, seq))


_MOTO_SQS_DELAY = SqsMessage.delay
_MOTO_STOP_EXECUTION = StepFunctionResponse.stop_execution


def _stop_execution(self: Any) -> Any:
    """StopExecution keeping the ``error`` and ``cause`` it was given, as Step Functions does
    (DescribeExecution answers them): moto stops with neither. The engine stops an execution
    on one of its sequence's exit events with ``mailstep.stopped`` and ``event <type>``, which
    the console lists as an exit (its goal reached), not as a stop or a failure."""
    answer = _MOTO_STOP_EXECUTION(self)
    execution = self.stepfunction_backend.describe_execution(self._get_param("executionArn"))
    execution.error = self._get_param("error") or None
    execution.cause = self._get_param("cause") or None
    return answer


def _sqs_delay(self: Any, delay_seconds: int) -> None:
    """A message's ``DelaySeconds`` on the virtual clock (instant in tests, ``--speed`` times
    faster in dev), recorded like a Wait state's time."""
    clock = ACTIVE.clock
    if clock is None:
        _MOTO_SQS_DELAY(self, delay_seconds)
        return
    clock.record_delay(float(delay_seconds))
    self.delayed_until = unix_time() * 1000 + clock.wall_seconds(float(delay_seconds)) * 1000


_TRANSACTIONS = threading.RLock()  # reentrant: a transaction's writes go through the single-item ones
_MOTO_TRANSACT_WRITE_ITEMS = dynamodb_models.DynamoDBBackend.transact_write_items


_Written = list[tuple[str, dict[str, Any], dict[str, Any] | None]]  # (table, key, item before)
_Reason = tuple[str | None, str | None, dict[str, Any] | None]  # (code, message, item): a CancellationReason


def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
    """moto's TransactWriteItems with the same checks and errors, but an item-level rollback.

    The local runtime installs it, and so do the integration tests on moto's in-process mock
    (``tests/integration/conftest.py``): one emulation of DynamoDB transactions for both.

    moto deep-copies every table a transaction names before it starts (O(table size) per
    call, holding the GIL: the cost grows with every item the runtime stores) and, when a
    condition fails, puts those copies back whole, losing the writes other threads made in
    between. Here transactions run one at a time, each remembers the items it writes, and
    a cancelled one restores exactly those items, as DynamoDB's isolation implies.
    """
    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    with _TRANSACTIONS:
        written: _Written = []
        targets: set[tuple[str, str]] = set()
        reasons: list[_Reason] = []
        for entry in transact_items:
            if len(list(entry.keys())) > 1:
                raise TransactWriteSingleOpException
            try:
                reasons.append(_transact_one(self, entry, targets, written))
            except (MultipleTransactionsException, MockValidationException):
                _roll_back(self, written)
                raise
        if any(code is not None for code, _, _ in reasons):
            _roll_back(self, written)
            raise TransactionCanceledException(reasons)


def _transact_one(
    backend: Any, entry: dict[str, Any], targets: set[tuple[str, str]], written: _Written
) -> _Reason:
    """One operation of a transaction: its condition checked, the item it changes remembered in
    ``written`` (as it was before), the write made. Returns the operation's cancellation reason
    (all None: it went through); raises what cancels the whole transaction at once."""
    original_item: dict[str, Any] | None = None
    try:
        op_type, op = next(iter(entry.items()))
        if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
            raise ValueError("Unsupported transaction operation")
        table_name = op["TableName"]
        key = _operation_key(backend, op_type, op)
        target = (str(table_name), str(dict(sorted(key.items()))))
        if target in targets:
            raise MultipleTransactionsException()
        targets.add(target)
        current = backend.get_item(table_name, key)
        condition = op.get("ConditionExpression")
        names, values = op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
        if condition is not None and not get_filter_expression(condition, names, values).expr(current):
            if op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current:
                original_item = current.to_json()["Attributes"]
            raise ConditionalCheckFailed(item=original_item)
        if op_type != "ConditionCheck":
            written.append(
                (table_name, key, None if current is None else copy.deepcopy(current.to_json()["Attributes"]))
            )
            common = {
                "condition_expression": condition,
                "expression_attribute_names": names,
                "expression_attribute_values": values,
            }
            _write(backend, op_type, op, key, common)
        return None, None, None
    except (MultipleTransactionsException, MockValidationException):
        raise
    except ConditionalCheckFailed as exc:
        return "ConditionalCheckFailed", str(exc.message), original_item
    except Exception as exc:  # moto reports any other failure per item, like DynamoDB
        return type(exc).__name__, str(exc), original_item


def _operation_key(backend: Any, op_type: str, op: dict[str, Any]) -> dict[str, Any]:
    """The key of the item an operation names (a Put names it by its item)."""
    if op_type != "Put":
        return op["Key"]
    table = backend.get_table(op["TableName"])
    key = {table.hash_key_attr: op["Item"][table.hash_key_attr]}
    if table.range_key_attr is not None:
        key[table.range_key_attr] = op["Item"][table.range_key_attr]
    return key


def _write(
    backend: Any, op_type: str, op: dict[str, Any], key: dict[str, Any], common: dict[str, Any]
) -> None:
    table_name = op["TableName"]
    if op_type == "Put":
        backend.put_item(table_name, op["Item"], **common)
    elif op_type == "Delete":
        backend.delete_item(table_name, key, **common)
    else:
        backend.update_item(table_name, key, update_expression=op["UpdateExpression"], **common)


def _roll_back(backend: Any, written: _Written) -> None:
    """Put back the items a transaction wrote, last first, as they were before it."""
    for table_name, key, attributes in reversed(written):
        if attributes is not None:
            backend.put_item(table_name, attributes)
        elif backend.get_item(table_name, key) is not None:
            backend.delete_item(table_name, key)


# Routes moto's server lacks for the SES v2 operations added here.
_DESTINATIONS = "{0}/v2/email/configuration-sets/(?P<ConfigurationSetName>[^/]+)/event-destinations"
_SESV2_EXTRA_PATHS = {
    "{0}/v2/email/account$": SESV2Response.dispatch,
    _DESTINATIONS + "$": SESV2Response.dispatch,
    _DESTINATIONS + "/(?P<EventDestinationName>[^/]+)$": SESV2Response.dispatch,
    "{0}/v2/email/configuration-sets/(?P<ConfigurationSetName>[^/]+)/sending$": SESV2Response.dispatch,
}


CALLBACK_POLL_S = 0.1  # how often a callback Task's wait checks that its execution still runs
_EVAL_WAIT_FOR_TASK_TOKEN = sfn_callback.StateTaskServiceCallback._eval_wait_for_task_token


def _eval_wait_for_task_token(
    self: Any, env: Any, timeout_seconds: int, callback_endpoint: Any, heartbeat_endpoint: Any
) -> Any:
    """Wait for the task token to come back while the execution runs. A stopped execution's Task
    ends quietly, as moto's Wait state does when its execution stops: an empty outcome the stopped
    program never acts on (any error would be recorded as the execution's failure, overriding the
    stop); ExecutionAborted follows."""
    if heartbeat_endpoint is not None:
        return _EVAL_WAIT_FOR_TASK_TOKEN(self, env, timeout_seconds, callback_endpoint, heartbeat_endpoint)
    deadline = _time.monotonic() + timeout_seconds
    while env.is_running() and _time.monotonic() < deadline:
        outcome = callback_endpoint.wait(timeout=CALLBACK_POLL_S)
        if outcome is not None:
            return outcome
    if not env.is_running():
        return CallbackOutcomeSuccess(callback_id=callback_endpoint.callback_id, output="{}")
    return _EVAL_WAIT_FOR_TASK_TOKEN(self, env, 0, callback_endpoint, heartbeat_endpoint)


_CREATE_SCHEDULE = EventBridgeSchedulerBackend.create_schedule
_UPDATE_SCHEDULE = EventBridgeSchedulerBackend.update_schedule
_DELETE_SCHEDULE = EventBridgeSchedulerBackend.delete_schedule


def _armed(schedule: Any) -> Any:
    if ACTIVE.schedules is not None:
        ACTIVE.schedules.armed(
            schedule.group_name, schedule.name, schedule.schedule_expression, schedule.target
        )
    return schedule


def armed_create_schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
    return _armed(_CREATE_SCHEDULE(self, *args, **kwargs))


def armed_update_schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
    return _armed(_UPDATE_SCHEDULE(self, *args, **kwargs))


def forgetting_delete_schedule(self: Any, group_name: str | None, name: str) -> None:
    _DELETE_SCHEDULE(self, group_name, name)
    if ACTIVE.schedules is not None:
        ACTIVE.schedules.forget(group_name or "default", name)


def install() -> None:
    """Apply every patch (idempotent). Which clock and SES they use is set in ``ACTIVE``."""
    global _installed
    with _install_lock:
        if _installed:
            return
        self_check()
        LambdaFunction._invoke_lambda = _invoke_lambda  # type: ignore[method-assign]
        WaitFunction._wait_interval = _wait_interval  # type: ignore[method-assign]
        retrier_decl.time = _RetryTime()  # type: ignore[assignment]
        retrier_decl.RetrierDecl._eval_body = _retrier_eval_body  # type: ignore[method-assign]
        sfn_boto_client.moto_server_port = _moto_server_port
        LambdaBackend.create_event_source_mapping = _create_event_source_mapping  # type: ignore[method-assign]
        StreamShard.add = _stream_add  # type: ignore[method-assign]
        SqsMessage.delay = _sqs_delay  # type: ignore[method-assign]
        StepFunctionResponse.stop_execution = _stop_execution  # type: ignore[method-assign]
        SfnEnvironment.set_error = _set_error  # type: ignore[method-assign]
        dynamodb_models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
        sesv2_urls.url_paths.update(_SESV2_EXTRA_PATHS)
        SESV2Response.send_email = _send_email  # type: ignore[method-assign]
        SESV2Response.get_account = _get_account  # type: ignore[attr-defined]
        SESV2Response.create_configuration_set_event_destination = _create_event_destination  # type: ignore

        SESV2Response.update_configuration_set_event_destination = _update_event_destination  # type: ignore[attr-defined]
        SESV2Response.get_configuration_set_event_destinations = _get_event_destinations  # type: ignore[attr-defined]
        SESV2Response.delete_configuration_set_event_destination = _delete_event_destination  # type: ignore[attr-defined]
        SESV2Response.put_configuration_set_sending_options = _put_sending_options  # type: ignore[attr-defined]
        SESV2Response.get_configuration_set = _get_configuration_set  # type: ignore[method-assign]
        SESV2Response.get_email_identity = _get_email_identity  # type: ignore[method-assign]
        sfn_callback.StateTaskServiceCallback._eval_wait_for_task_token = _eval_wait_for_task_token  # type: ignore[method-assign]
        EventBridgeSchedulerBackend.create_schedule = armed_create_schedule  # type: ignore[method-assign]
        EventBridgeSchedulerBackend.update_schedule = armed_update_schedule  # type: ignore[method-assign]
        EventBridgeSchedulerBackend.delete_schedule = forgetting_delete_schedule  # type: ignore[method-assign]
        _serve_faster()
        atomic_item_writes()
        _installed = True


ITEM_WRITES = ("put_item", "update_item", "delete_item")


def atomic_item_writes() -> None:
    """A single-item write (PutItem, UpdateItem, DeleteItem with its condition) as one step, as
    DynamoDB makes it: moto reads the item, checks the condition and writes in separate Python
    steps, so two threads' conditional writes of one item could both pass and an ``x = x + 1``
    could lose one. They run one at a time, and never in the middle of a transaction. The
    integration tests install it on moto's in-process mock too."""
    for name in ITEM_WRITES:
        write = getattr(dynamodb_models.DynamoDBBackend, name)
        if getattr(write, "_mailstep_atomic", False):
            continue
        setattr(dynamodb_models.DynamoDBBackend, name, one_at_a_time(write))


def one_at_a_time(write: Callable[..., Any]) -> Callable[..., Any]:
    def atomic(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _TRANSACTIONS:
            return write(self, *args, **kwargs)

    atomic._mailstep_atomic = True  # type: ignore[attr-defined]
    return atomic


class KeepAliveRequestHandler(MotoRequestHandler):
    """moto's request handler, keeping the connection open between requests.

    werkzeug's development server (3.x) answers every request with ``Connection: close``, so
    each request to the endpoint opened a TCP connection and a server thread: a third of a
    request's time in the console's reads went to connecting (``getaddrinfo``, ``connect``, the
    thread start), and the server waited 10 ms on each closed socket for more input. Here a
    request whose body has a ``Content-Length`` (every AWS SDK request but a chunked upload) is
    read whole, handed to moto's application as werkzeug would, and answered with the
    response's length, over HTTP/1.1 without closing: botocore's pool reuses the connection.
    Anything else (a chunked body) goes to werkzeug's own handling, which closes the connection.
    """

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def run_wsgi(self) -> None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            super().run_wsgi()
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        self.environ = environ = self.make_environ()
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        started: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            started[:] = [status, headers]
            return chunks.append

        chunks: list[bytes] = []
        try:
            answer = self.server.app(environ, start_response)
            try:
                chunks.extend(answer)
            finally:
                if hasattr(answer, "close"):
                    answer.close()
        except Exception as exc:  # as werkzeug answers an application's error: a 500, closed
            self.close_connection = True
            self.server.log("error", f"Error on request: {type(exc).__name__}: {exc}")
            started[:] = ["500 Internal Server Error", [("Content-Type", "text/plain")]]
            chunks[:] = [b"Internal Server Error"]
        status, headers = started
        code, _, reason = status.partition(" ")
        data = b"".join(chunks)
        self.send_response(int(code), reason)
        for key, value in headers:
            if key.lower() not in {"content-length", "connection", "transfer-encoding"}:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        # the head and the body in one write: two small writes on an open connection wait for
        # the client's delayed acknowledgement of the first (Nagle's algorithm), about 40 ms
        self._headers_buffer.append(b"\r\n")  # type: ignore[attr-defined]
        if self.command != "HEAD":
            self._headers_buffer.append(data)  # type: ignore[attr-defined]
        self.flush_headers()


def _serve_faster() -> None:
    """Costs of moto's server that grow with the request rate or the queue length, not
    with the work:

    - it lists moto's package directory (``os.listdir`` + ``isdir`` per entry) on every
      request, under its dispatch lock, to find the backend: the list never changes while
      the process runs, so it is computed once;
    - SNS makes a signing certificate per notification (see ``_sns_post_data``);
    - SQS ReceiveMessage checks every message's retention through GetQueueAttributes, which
      rebuilds every attribute of the queue (counting all its messages) three times: the
      retention period is read from the queue itself;
    - SQS counts a queue's messages (every SendMessage does, through the queue's attributes, and
      every ReceiveMessage lists the visible ones) reading the clock twice per message: a queue
      with a backlog made each send and receive cost its length in clock reads, so the
      emulator slowed down as a broadcast's events queued up. The counts now read the clock
      once per count (:func:`_sqs_counts`), with the same comparisons;
    - DynamoDB reads (see :func:`dynamodb_read_serialized`) walked the response model for
      every attribute of every item returned: 80 % of a Scan's time;
    - every request listed the members of its service's response class (``inspect.getmembers``)
      to see whether the action is one of its methods: the classes do not change once the
      patches above are in, so each class's method names are listed once.
    """
    modules = tuple(moto_backends.list_of_moto_modules())
    moto_backends.list_of_moto_modules = lambda: modules  # type: ignore[assignment]
    moto_responses.method_names_from_class = _method_names  # type: ignore[assignment]
    SQSBackend.is_message_valid_based_on_retention_period = _retained  # type: ignore[method-assign]
    _sqs_counts()
    SnsSubscription.get_post_data = _sns_post_data  # type: ignore[method-assign]
    faster_dynamodb_reads()


_MOTO_METHOD_NAMES = moto_responses.method_names_from_class


@functools.cache
def _method_names(clazz: object) -> frozenset[str]:
    return frozenset(_MOTO_METHOD_NAMES(clazz))


def faster_dynamodb_reads() -> None:
    """The DynamoDB read patches of :func:`_serve_faster` (also on the integration tests'
    in-process moto): the same answers, at the cost of what a read reaches.

    - A Query reads its partition (or the items holding an index key's value), not the table
      (:func:`partition_query`), and a read's answer skips moto's walk of the response model
      (:func:`dynamodb_read_serialized`).
    - ``DynamoType.cast_value`` answers a string, binary or boolean (its value as stored) before
      the five type checks moto makes first: every key comparison, condition and filter reads it.
    - A Scan's ``all_items`` sorts the table by each item's key values read once, where moto's
      sort compared key objects, casting both sides of every comparison (two thirds of a Scan
      page's time at a few thousand items). A table's key attributes have one type each, so the
      order is the same. A Scan page is handed only the items of its segment after its start key
      (:func:`start_key_scan`), not the whole table to walk.
    """
    for owner, name, patched in dynamodb_read_patches():
        setattr(owner, name, patched)


def dynamodb_read_patches() -> list[tuple[Any, str, Any]]:
    """(class, attribute, replacement) of :func:`faster_dynamodb_reads`."""
    return [
        (DynamoHandler, "serialized", dynamodb_read_serialized),
        (DynamoType, "cast_value", _cast_value),
        (dynamodb_models.Table, "query", partition_query),
        (dynamodb_models.Table, "all_items", _all_items),
        (dynamodb_models.Table, "scan", start_key_scan),
        (dynamodb_models.Table, "put_item", _versioned_put_item),
        (dynamodb_models.Table, "delete_item", _versioned_delete_item),
        (dynamodb_models.DynamoDBBackend, "update_item", _versioned_update_item),
    ]


# What moto's SQS properties compare (the originals, kept before the patch for self_check).
_SQS_CLOCK = {
    (SqsMessage, "visible"): "current_time > self.visible_at",
    (SqsMessage, "delayed"): "current_time < self.delayed_until",
    (Queue, "messages"): "message.visible and not message.delayed",
    (Queue, "approximate_number_of_messages_delayed"): "m.delayed",
    (Queue, "approximate_number_of_messages_not_visible"): "not m.visible",
    (Queue, "approximate_number_of_messages"): "len(self.messages)",
}
_MOTO_SQS_PROPERTIES = {key: inspect.getattr_static(key[0], key[1], None) for key in _SQS_CLOCK}


def sqs_visible(queue: Any) -> list[Any]:
    """``Queue.messages``: the messages visible and not delayed, at one instant."""
    now = unix_time_millis()
    return [m for m in queue._messages if now > m.visible_at and not now < m.delayed_until]


def sqs_delayed(queue: Any) -> int:
    now = unix_time_millis()
    return sum(1 for m in queue._messages if now < m.delayed_until)


def sqs_not_visible(queue: Any) -> int:
    now = unix_time_millis()
    return sum(1 for m in queue._messages if not now > m.visible_at)


def _sqs_counts() -> None:
    """moto's ``Queue.messages`` and approximate counts, with one clock read per call instead
    of one per message (moto's ``Message.visible`` is ``now > visible_at`` and
    ``Message.delayed`` ``now < delayed_until``, each reading the clock; checked by
    :func:`self_check`)."""
    Queue.messages = property(sqs_visible)  # type: ignore[method-assign,assignment]
    Queue.approximate_number_of_messages_delayed = property(sqs_delayed)  # type: ignore[method-assign,assignment]
    Queue.approximate_number_of_messages_not_visible = property(sqs_not_visible)  # type: ignore[method-assign,assignment]
    Queue.approximate_number_of_messages = property(lambda queue: len(sqs_visible(queue)))  # type: ignore[method-assign,assignment]


# A Query on a table's own key: moto looks at every item of the table (``all_items``) and keeps
# those of the partition, so each Query costs the table's size, and a write to another
# partition meanwhile can break the walk ("dictionary changed size during iteration": a 500).
# Then it sorts the whole partition (Python comparisons of its key objects) before it applies
# ``Limit``: a Query of 10 items of a 10,000-item partition took 76 ms, where DynamoDB reads
# 10 items. While a thread runs such a Query, ``all_items`` gives it only that partition's
# items (copied at once); with a ``Limit`` and string sort keys, only the items the Query can
# reach: those meeting the sort-key condition, after ``ExclusiveStartKey`` in the Query's
# direction, the first ``Limit`` of them and the item after them (so moto still sees that there
# is more and answers a ``LastEvaluatedKey``, as it does). moto then filters, sorts and pages that
# list as before (``tests/unit/test_local_dynamodb_reads.py`` compares both).
_MOTO_TABLE_QUERY = dynamodb_models.Table.query
_MOTO_ALL_ITEMS = dynamodb_models.Table.all_items
_partition = threading.local()


_QUERY_SIGNATURE = inspect.signature(_MOTO_TABLE_QUERY)


def partition_query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
    """``Table.query`` reading only the queried partition when no index is named (moto's
    backend passes ``index_name`` by position), and only the items holding the index's key
    value when one is (:func:`_index_items`)."""
    arguments = _QUERY_SIGNATURE.bind(self, hash_key, *args, **kwargs).arguments
    if arguments.get("index_name"):
        conditions = list(arguments.get("hash_key_conditions") or [])
        if not conditions or any(getattr(v, "type", None) != "S" for _, v in conditions):
            return _MOTO_TABLE_QUERY(self, hash_key, *args, **kwargs)  # string keys only
        _partition.key = (self, None, conditions)
    elif hash_key is None:
        return _MOTO_TABLE_QUERY(self, hash_key, *args, **kwargs)
    else:
        _partition.key = (self, hash_key, arguments)
    try:
        return _MOTO_TABLE_QUERY(self, hash_key, *args, **kwargs)
    finally:
        _partition.key = None


_ByValue = dict[tuple[tuple[str, Any], ...], list[Any]]  # index key value -> its items


def _index_items(self: Any, conditions: list[tuple[str, Any]]) -> list[Any]:
    """The table's items whose index key attributes equal ``conditions`` (a Query on a global
    secondary index), where moto's own pass runs its key checks on every item of the table (the
    events table's index Queries took about 140 ms each at 10,000 subscribers). moto then checks
    these few items as before.

    A pass over the table compares the stored values. When no write reached the table since the
    last index Query of the same key attributes (:func:`_table_written` bumps a version), the
    pass builds a map of every key value to its items instead and keeps it, so the Queries after
    it, until the next write, are one lookup (a console page's 16 index Queries: one pass, not
    16). A table written between its index Queries keeps the single pass: no map is built that
    the next write would throw away."""
    names = tuple(name for name, _ in conditions)
    value = tuple((held.type, held.value) for _, held in conditions)
    version = getattr(self, _VERSION, 0)
    kept: dict[tuple[str, ...], tuple[int, _ByValue | None]] = self.__dict__.setdefault(_INDEXES, {})
    seen_at, mapped = kept.get(names, (None, None))
    unwritten = seen_at == version  # no write since the last index Query of these attributes
    if unwritten and mapped is not None:
        return list(mapped.get(value, ()))
    by_value: _ByValue | None = None
    found: list[Any] = []
    if unwritten:  # read twice with no write between: map it
        by_value = {}
        for item in _every_item(self):
            key = _index_value(item.attrs, names)
            if key is not None:
                by_value.setdefault(key, []).append(item)
        found = list(by_value.get(value, ()))
    else:
        for item in _every_item(self):
            if _index_value(item.attrs, names) == value:
                found.append(item)
    kept[names] = (version, by_value)
    return found


def _every_item(table: Any) -> Iterator[Any]:
    for stored in list(table.items.values()):  # a copy: writes to other partitions go on meanwhile
        yield from list(stored.values()) if table.range_key_attr else [stored]


def _index_value(attrs: dict[str, Any], names: tuple[str, ...]) -> tuple[tuple[str, Any], ...] | None:
    """The (type, value) of each of ``names`` in ``attrs``; None when one is missing."""
    found = []
    for name in names:
        held = attrs.get(name)
        if held is None:
            return None
        found.append((held.type, held.value))
    return tuple(found)


# Every write to a table gives it a new version (before and after the write, so a map built
# while a write was under way is not kept): moto's ``Table.put_item`` and ``delete_item`` (every
# Put, Delete, batch write and transaction's put goes through them) and the backend's
# ``update_item`` (it changes the stored item in place).
_VERSION = "_mailstep_version"
_INDEXES = "_mailstep_indexes"
_VERSIONS = itertools.count(1)
_MOTO_TABLE_PUT_ITEM = dynamodb_models.Table.put_item
_MOTO_TABLE_DELETE_ITEM = dynamodb_models.Table.delete_item
_MOTO_UPDATE_ITEM = dynamodb_models.DynamoDBBackend.update_item


def _table_written(table: Any) -> None:
    setattr(table, _VERSION, next(_VERSIONS))


def _versioned(write: Callable[..., Any], table_of: Callable[..., Any]) -> Callable[..., Any]:
    """``write`` (a method of moto's), giving the table it writes (``table_of(self, args,
    kwargs)``) a new version before and after it."""

    def versioned(self: Any, *args: Any, **kwargs: Any) -> Any:
        table = table_of(self, args, kwargs)
        _table_written(table)
        try:
            return write(self, *args, **kwargs)
        finally:
            _table_written(table)

    return versioned


def _the_table(table: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return table


def _named_table(backend: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return backend.get_table(args[0] if args else kwargs["table_name"])


_versioned_put_item = _versioned(_MOTO_TABLE_PUT_ITEM, _the_table)
_versioned_delete_item = _versioned(_MOTO_TABLE_DELETE_ITEM, _the_table)
_versioned_update_item = _versioned(_MOTO_UPDATE_ITEM, _named_table)


_MOTO_CAST_VALUE: Callable[[Any], Any] = inspect.getattr_static(DynamoType, "cast_value").fget  # a property's
_AS_STORED = frozenset({"S", "B", "BOOL"})  # the types whose cast value is the stored value


@property  # type: ignore[misc]
def _cast_value(self: Any) -> Any:
    if self.type in _AS_STORED:
        return self.value
    return _MOTO_CAST_VALUE(self)


def _key_sorted_items(table: Any) -> list[Any]:
    """moto's ``Table.all_items``: every item, sorted by (hash key, range key), each key's
    value cast once."""
    return sorted(_every_item(table), key=_plain_key)


def _plain_key(item: Any) -> tuple[Any, ...]:
    """(hash key, range key) of ``item`` as plain values: (hash key,) without a range key."""
    return (
        (item.hash_key.cast_value,)
        if item.range_key is None
        else (item.hash_key.cast_value, item.range_key.cast_value)
    )


# A Scan page: moto walks the table's items from the first on every page, skipping those of other
# segments and those up to ``ExclusiveStartKey`` one comparison (and, for a segment, one MD5 of
# the hash key) at a time, so a paged Scan cost the square of the table. The page is handed the
# items of its segment after its start key instead; moto then checks, filters and pages them as
# before (tests/unit/test_local_dynamodb_reads.py compares both).
_MOTO_TABLE_SCAN = dynamodb_models.Table.scan
_SCAN_SIGNATURE = inspect.signature(_MOTO_TABLE_SCAN)
_scanning = threading.local()


def start_key_scan(self: Any, *args: Any, **kwargs: Any) -> Any:
    """``Table.scan`` over the items its page can reach (a Scan of the table, not of an index)."""
    arguments = _SCAN_SIGNATURE.bind(self, *args, **kwargs).arguments
    if arguments.get("index_name"):
        return _MOTO_TABLE_SCAN(self, *args, **kwargs)
    _scanning.page = (self, arguments.get("exclusive_start_key"), arguments.get("segments", (None, None)))
    try:
        return _MOTO_TABLE_SCAN(self, *args, **kwargs)
    finally:
        _scanning.page = None


@functools.lru_cache(maxsize=1 << 18)
def _segment_hash(hash_value: str) -> int:
    """The byte moto's ``Item.is_within_segment`` reduces modulo the segment count."""
    return int(md5_hash(hash_value.encode("utf8")).digest()[0])


def _scan_page_items(table: Any, start: dict[str, Any] | None, segments: Any) -> list[Any]:
    items = _key_sorted_items(table)
    if tuple(segments) != (None, None):
        segment, total = segments
        items = [i for i in items if _segment_hash(i.hash_key.value) % total == segment]
    if not start:
        return items
    names = [table.hash_key_attr, *([table.range_key_attr] if table.range_key_attr else [])]
    if any(name not in start for name in names):
        return items  # moto's own walk decides
    after = tuple(DynamoType(start[name]).cast_value for name in names)
    return items[bisect.bisect_right(items, after, key=_plain_key) :]  # the keys of log(n) items


def _all_items(self: Any) -> Any:
    restricted = getattr(_partition, "key", None)
    if restricted is None or restricted[0] is not self:
        page = getattr(_scanning, "page", None)
        if page is not None and page[0] is self:
            return _scan_page_items(self, page[1], page[2])
        return _key_sorted_items(self)
    if restricted[1] is None:
        return _index_items(self, restricted[2])
    found = self.items.get(restricted[1])  # keyed by the hash key's DynamoType, as put_item stores it
    if found is None:
        return []
    if not self.range_key_attr:
        return [found]
    return _reachable(dict(found), self.range_key_attr, restricted[2])


def _reachable(found: dict[Any, Any], range_key: str, arguments: dict[str, Any]) -> list[Any]:
    """The items of one partition (sort key -> item) that a Query with ``arguments`` can reach
    within its ``Limit`` (see above); every item when the Query has no ``Limit``, a sort-key
    condition on several attributes, or a sort key that is not a string."""
    limit = arguments.get("limit")
    conditions = arguments.get("range_key_conditions") or []
    if not limit or len(conditions) > 1 or any(k.type != "S" for k in found):
        return list(found.values())
    comparison = arguments.get("range_comparison")
    test = get_comparison_func(comparison) if comparison else None
    if comparison and test is None:
        return list(found.values())
    tests = [o.cast_value for o in arguments.get("range_objs") or []]
    forward = arguments.get("scan_index_forward") is not False
    start = (arguments.get("exclusive_start_key") or {}).get(range_key)
    after = start.get("S") if isinstance(start, dict) else getattr(start, "value", None)
    ordered = sorted(found, key=lambda k: k.value, reverse=not forward)
    reachable, matched = [], 0
    for k in ordered:
        value = k.value
        if after is not None and (value <= after if forward else value >= after):
            continue
        if matched == limit:  # any next item: moto answers a LastEvaluatedKey when there is one
            reachable.append(found[k])
            break
        if test is None or test(value, *tests):
            reachable.append(found[k])
            matched += 1
    return reachable


_MOTO_DYNAMODB_SERIALIZED = DynamoHandler.serialized
# Reads whose output is the items as moto already holds them in DynamoDB's JSON form.
PLAIN_JSON_READS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan"})


def dynamodb_read_serialized(self: Any, action_result: Any) -> TYPE_RESPONSE:
    """The response of a DynamoDB read as ``json.dumps`` of moto's result, where moto's own
    serializer walks the output model for every attribute value to produce the same JSON (a
    Scan of 14,000 items: 10-14 s, most of it there). Other operations, and a result that is
    not plain JSON (bytes of a binary attribute), keep moto's serializer; the status and the
    headers are always moto's. ``tests/unit/test_local_dynamodb_reads.py`` compares both."""
    if type(action_result) is not DynamoResult or self._get_action() not in PLAIN_JSON_READS:
        return _MOTO_DYNAMODB_SERIALIZED(self, action_result)
    result = cast(dict[str, Any], action_result.result)  # a DynamoResult holds a dict
    try:
        body = json.dumps({name: value for name, value in result.items() if value is not None})
    except TypeError:
        return _MOTO_DYNAMODB_SERIALIZED(self, action_result)
    status, headers, _ = _MOTO_DYNAMODB_SERIALIZED(self, DynamoResult({}))
    return status, headers, body


_MOTO_SNS_POST_DATA = SnsSubscription.get_post_data


def _sns_post_data(
    self: Any, message: str, message_id: str, subject: str | None, message_attributes: Any = None
) -> dict[str, Any]:
    """moto builds and signs a new X.509 signing certificate for every SNS notification (an
    RSA signature, and a PEM kept in memory for ever). SNS signs with one certificate for a
    long time: the first notification of a subscription makes it (moto's code), the next
    ones reuse it and only sign the message, in the same format."""
    cert_url = getattr(self, "_mailstep_cert_url", None)
    if cert_url is None:
        data = dict(_MOTO_SNS_POST_DATA(self, message, message_id, subject, message_attributes))
        self._mailstep_cert_url = data["SigningCertURL"]
        return data
    timestamp = iso_8601_datetime_with_milliseconds()
    signed = (
        f"Message\n{message}\nMessageId\n{message_id}\nTimestamp\n{timestamp}\n"
        f"TopicArn\n{self.topic.arn}\nType\nNotification\n"
    )
    signature = self.private_key().sign(signed.encode("UTF-8"), padding.PKCS1v15(), hashes.SHA256())
    data = {
        "Type": "Notification",
        "MessageId": message_id,
        "TopicArn": self.topic.arn,
        "Message": message,
        "Timestamp": timestamp,
        "SignatureVersion": "2",
        "Signature": base64.b64encode(signature).decode("utf-8"),
        "SigningCertURL": cert_url,
        "UnsubscribeURL": f"https://sns.{self.topic.sns_backend.region_name}.amazonaws.com/"
        f"?Action=Unsubscribe&SubscriptionArn={self.arn}",
    }
    if subject:
        data["Subject"] = subject
    if message_attributes:
        data["MessageAttributes"] = message_attributes
    return data


def _retained(self: Any, queue_name: str, message: Any) -> bool:
    period = int(self.get_queue(queue_name).message_retention_period)
    return bool(period + message.sent_timestamp / 1000 > unix_time())


def detach_inline_event_sources(queue: Any) -> dict[str, Any]:
    """Take the event source mappings off a moto queue (moto would invoke them inline on
    every SendMessage, one message at a time); returns them for the pollers."""
    mappings = dict(queue.lambda_event_source_mappings)
    queue.lambda_event_source_mappings.clear()
    return mappings
