"""The local runtime: the whole stack on an embedded emulated AWS, as a context manager.

    with LocalRuntime(RuntimeConfig()) as rt:
        rt.endpoint, rt.api_url, rt.public_url, rt.api_key, rt.outbox

Serves moto's application in this process (``local_aws.listeners``: loopback ``Host`` only, no
cross-origin request, no CORS) and talks to it through one client factory
(``rt.aws``, a ``shared.core.aws.ClientFactory`` for the endpoint): provisions everything in
``shared.core.specs`` through ``local_aws.provision``,
runs every Lambda from the deployment artifact (``local_aws.artifact``: the synthesized
template and the bundled code asset) in execution environments of its own on Python 3.12
with the template's environment and IAM (``local_aws.deployment``, ``local_aws.environments``),
Step Functions on a virtual clock, a faithful SES, and an HTTP front for the API routes,
served twice: plain http on ``api_port`` (``api_url``) and https on ``public_port``
(``public_url``, the public base URL of links in mail) with a self-signed certificate made
at start in ``<state dir>/tls/`` (``local_aws.tls``). ``runtime.json`` (the API key) is written
mode 0600 (``ops.loopback.write_private``).
The runtime never writes its process environment: whatever runs in this process (provisioning,
the stack registration, EventBridge, ``mailstep demo``, the bench) reaches the endpoint through
``rt.aws``, and moto's Step Functions interpreter through ``local_aws.hooks`` (``ACTIVE.port``).
One runtime per process (moto's backends and the hooks are process-wide).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import ssl
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from local_aws import collector, hooks, ses_events
from local_aws.artifact import Artifact, build
from local_aws.cfn_stack import register_stack
from local_aws.clock import VirtualClock
from local_aws.deployment import Deployment, bind, deploy, uploaded_function
from local_aws.environments import DEFAULT_CONCURRENCY, Environments, close_preloaders
from local_aws.eventbridge import (
    ExecutionStatusRules,
    LambdaTargets,
    ScheduledRules,
    async_targets,
    rules_of,
    scheduled_rules_of,
)
from local_aws.http_front import Cors, HttpFront
from local_aws.lambdas import STATS, PollerCounts, SqsPoller, invoke
from local_aws.listeners import LocalServer, LoopbackGuard, listen
from local_aws.provision import LocalResources, local_function_name, provision
from local_aws.scheduler import OneTimeSchedules
from local_aws.ses import DEFAULT_MAX_24_HOUR_SEND, DEFAULT_MAX_SEND_RATE, LocalSes
from local_aws.streams import ShardReaders, StreamPoller
from local_aws.template import LocalTemplate
from local_aws.tls import TlsFiles, client_context, ensure_certificate, server_context
from ops.loopback import private_dir, write_private
from ops.targets import STATE_FILE
from shared.core import specs
from shared.core.aws import AwsConfig, ClientFactory, reset_clients
from shared.core.observability import logger
from shared.core.secrets import reset_cache

ACCOUNT_ID = "123456789012"
# Batches in flight per SQS mapping without a MaximumConcurrency (LocalRuntime._start_poller).
LOCAL_MAPPING_CONCURRENCY = 1
# DynamoDB Streams: "no more than two processes at most should be reading from the same streams
# shard at the same time" (DynamoDB Developer Guide, "Change data capture for DynamoDB Streams")
STREAM_READERS_PER_SHARD = 2


@dataclass
class RuntimeConfig:
    port: int = 0  # AWS endpoint; 0 = a free port
    api_port: int = 0  # HTTP API, plain http; 0 = a free port
    public_port: int = 0  # the same API over https (public links); 0 = a free port
    speed: float | None = None  # None: waits are instant; N: N times faster than real time
    max_send_rate: float = DEFAULT_MAX_SEND_RATE
    max_24_hour_send: int = DEFAULT_MAX_24_HOUR_SEND
    state_dir: Path | None = None  # runtime.json + outbox/; None = a temporary folder
    api_key: str | None = None
    region: str = "us-east-1"
    # Check every AWS request of a function against its role policy in the template.
    enforce_iam: bool = True
    # A synthesized template to run instead of this checkout's (tests: a modified copy).
    template_override: dict[str, Any] | None = None
    # Emulate an account in the SES sandbox: mail only to verified identities (`mailstep local
    # verify`) and the mailbox simulator; sends authorized on the recipients' identities too.
    ses_sandbox: bool = False
    # Emulate a new sending domain whose identity SES has not verified yet: sends from it are
    # refused as SES refuses them until `mailstep local verify DOMAIN` (docs/local-runtime.md).
    identity_pending: bool = False
    # The reputation guardrail's local CloudWatch (local_aws/reputation.py): sends a set needs
    # before its rates count, and whether the stack's reputation alarms are evaluated.
    reputation_min_sends: int = 200
    reputation_alarms: bool = True
    # Context for synthesizing the template (added to cdk.json's and mailstep:local), e.g.
    # {"mailstep:sesMaxSendRate": 1000}: the bench runs the template a deployment would get.
    context: dict[str, Any] | None = None


@dataclass
class LocalRuntime:
    config: RuntimeConfig = field(default_factory=RuntimeConfig)
    aws: ClientFactory = field(init=False)  # clients of the embedded endpoint
    clock: VirtualClock = field(init=False)
    ses: LocalSes = field(init=False)
    resources: LocalResources = field(init=False)
    front: HttpFront = field(init=False)
    public_front: HttpFront = field(init=False)
    tls: TlsFiles = field(init=False)
    pollers: list[SqsPoller | StreamPoller] = field(default_factory=list, init=False)
    # the readers of each table stream's shard (by the shard's id()): every mapping reads every record
    stream_readers: dict[int, ShardReaders] = field(default_factory=dict, init=False)
    artifact: Artifact = field(init=False)
    deployment: Deployment | None = field(default=None, init=False)
    environments: Environments | None = field(default=None, init=False)
    eventbridge: ExecutionStatusRules | None = field(default=None, init=False)
    schedules: ScheduledRules | None = field(default=None, init=False)  # the daily hygiene run
    # EventBridge Scheduler's one-time schedules: what resumes the sequences' callback Tasks
    one_time_schedules: OneTimeSchedules | None = field(default=None, init=False)
    poller_counts: PollerCounts = field(default_factory=PollerCounts, init=False)
    started_in_s: float = field(default=0.0, init=False)
    _server: LocalServer | None = field(default=None, init=False)  # the AWS endpoint
    _server_thread: threading.Thread | None = field(default=None, init=False)
    _tmp: Any = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    # ----- lifecycle ---------------------------------------------------------------------
    def __enter__(self) -> LocalRuntime:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self.config.port

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.config.port}"

    @property
    def api_url(self) -> str:
        return self.front.url

    @property
    def public_url(self) -> str:
        """The https base URL of the API: ``PUBLIC_BASE_URL`` of every function."""
        return self.public_front.url

    def ssl_context(self) -> ssl.SSLContext:
        """A verifying client context that trusts the runtime's certificate (for ``public_url``)."""
        return client_context(self.tls.cert)

    @property
    def api_key(self) -> str:
        return self.resources.api_key

    @property
    def state_dir(self) -> Path:
        assert self.config.state_dir is not None
        return self.config.state_dir

    @property
    def outbox(self) -> Path:
        return self.state_dir / "outbox"

    def start(self) -> None:
        from moto.core.config import default_user_config

        started = time.perf_counter()
        config = self.config
        self.artifact = build(context=config.context)  # first: a fresh checkout synthesizes and bundles
        if config.template_override is not None:
            self.artifact = dataclasses.replace(self.artifact, template=config.template_override)
        # Each listener is bound as its port is chosen (``local_aws.listeners.listen``)
        self._endpoint_listener = listen("127.0.0.1", config.port)
        config.port = self._endpoint_listener.getsockname()[1]
        if config.state_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="mailstep-local-")
            config.state_dir = Path(self._tmp.name)
        private_dir(config.state_dir)  # made 0700: it holds runtime.json (the API key) and the TLS key
        self.tls = ensure_certificate(config.state_dir / "tls")
        self.aws = ClientFactory(AwsConfig.emulated(self.endpoint, config.region))
        default_user_config.setdefault("stepfunctions", {})["execute_state_machine"] = True

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        hooks.install()
        collector.install()  # full collections skip what survived the last one (the emulator's store)
        self.clock = VirtualClock(speed=config.speed)
        self.ses = LocalSes(
            self.outbox,
            account_id=ACCOUNT_ID,
            region=config.region,
            publish=self._publish_sns,
            max_send_rate=config.max_send_rate,
            max_24_hour_send=config.max_24_hour_send,
            sandbox=config.ses_sandbox,
        )
        self.ses.reputation.min_sends = config.reputation_min_sends
        self.ses.reputation.alarms_on = config.reputation_alarms
        self.ses.reputation.put_metric = self._put_reputation_metric
        self.ses.reputation.set_state = self._set_alarm_state
        hooks.ACTIVE.clock = self.clock
        hooks.ACTIVE.ses = self.ses
        hooks.ACTIVE.port = config.port
        hooks.ACTIVE.on_sqs_mapping = self._start_poller
        hooks.ACTIVE.on_stream_mapping = self._start_stream_poller
        STATS.reset()

        self._start_endpoint()
        reset = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")  # noqa: S310
        urllib.request.urlopen(reset, timeout=10)  # noqa: S310 - local URL: start from an empty account
        reset_clients()
        reset_cache()
        api_listener = listen("127.0.0.1", config.api_port)
        public_listener = listen("127.0.0.1", config.public_port)
        config.api_port = api_listener.getsockname()[1]
        config.public_port = public_listener.getsockname()[1]
        self.resources = provision(config.api_key, messaging=True, aws=self.aws)
        deployment = self._deploy_artifact(self.artifact, f"https://127.0.0.1:{config.public_port}")

        cors = Cors.from_template(self.artifact.template)  # the template's HTTP API CORS, if any
        self.front = HttpFront(
            specs.routes(),
            self.invoke_spec,
            port=config.api_port,
            control=self._control,
            cors=cors,
            listener=api_listener,
        )
        self.public_front = HttpFront(
            specs.routes(),
            self.invoke_spec,
            port=config.public_port,
            control=self._control,
            ssl_context=server_context(self.tls),
            stats=self.front.stats,
            cors=cors,
            listener=public_listener,
        )
        self.front.start()
        self.public_front.start()
        # The runtime as a stack, before runtime.json (tools wait for it); outputs first (schedule machine).
        register_stack(
            specs.STACK_NAME, self.stack_outputs(), deployment.template.stack_resources(), aws=self.aws
        )
        self.started_in_s = time.perf_counter() - started
        self._write_state()

    def _start_endpoint(self) -> None:
        """moto's application on 127.0.0.1:``port`` behind the listeners' guard
        (``local_aws.listeners``): loopback Host only, no cross-origin request, no CORS."""
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

        moto_app = DomainDispatcherApplication(create_backend_app)
        guarded = LoopbackGuard(moto_app, same_origin="/", cors=False)
        self._server = LocalServer(
            "127.0.0.1",
            self.config.port,
            guarded,
            handler=hooks.KeepAliveRequestHandler,
            listener=self._endpoint_listener,
        )
        self._server_thread = threading.Thread(
            target=self._server.serve_forever, name="aws-endpoint", daemon=True
        )
        self._server_thread.start()

    def _deploy_artifact(self, artifact: Artifact, public_url: str) -> Deployment:
        """Functions, roles, mappings and state machines from the synthesized template."""
        template = LocalTemplate(
            artifact.template, region=self.config.region, account=ACCOUNT_ID, stack_name=specs.STACK_NAME
        )
        bind(template, self.resources, public_url, aws=self.aws)
        # Everything moto invokes (routes, SQS mappings, Step Functions tasks) runs in the
        # environments; set before deploy() creates the mappings that start polling.
        self.environments = Environments(
            {},
            other=lambda function: uploaded_function(
                function,
                artifact,
                endpoint=self.endpoint,
                region=self.config.region,
                account=ACCOUNT_ID,
                logs_dir=self.logs_dir,
                aws=self.aws,
            ),
            ses_sandbox=self.config.ses_sandbox,
        )
        hooks.ACTIVE.invoker = self.environments.invoke
        self.deployment = deploy(
            template,
            self.resources,
            artifact,
            endpoint=self.endpoint,
            logs_dir=self.logs_dir,
            enforce_iam=self.config.enforce_iam,
            aws=self.aws,
        )
        self.environments.specs.update(self.deployment.environments)
        if self.config.identity_pending:
            self._hold_sending_identity()
        targets = LambdaTargets(
            self._invoke_function, self.config.region, ACCOUNT_ID, async_targets(template), self._send_failure
        )
        # The template's EventBridge rules on execution status changes (sequence cleanup).
        self.eventbridge = ExecutionStatusRules(
            rules_of(template), targets, self._execution_statuses, self.aws
        )
        self.eventbridge.start()
        self._reputation_alarms(template)
        # EventBridge Scheduler's one-time schedules (sequence callback Tasks), on the virtual clock.
        self.one_time_schedules = OneTimeSchedules(
            self.clock, self.aws, self._authorize_role, self._machine_waiting_on, self._delete_schedule
        )
        hooks.ACTIVE.schedules = self.one_time_schedules
        # The template's scheduled rules (list hygiene), on the runtime's calendar.
        self.schedules = ScheduledRules(scheduled_rules_of(template), targets, self.clock.calendar_now)
        self.schedules.start()
        self.resources = dataclasses.replace(self.resources, functions=self.deployment.functions)
        return self.deployment

    @property
    def logs_dir(self) -> Path:
        """One log file per function (its CloudWatch log group): ``<state dir>/logs/<name>.log``."""
        return self.state_dir / "logs"

    def stop(self) -> None:
        clock = getattr(self, "clock", None)
        if clock is not None:
            clock.resume()  # release the waits a pause holds
        for poller in self.pollers:
            poller.stop_event.set()
        if self.eventbridge is not None:
            self.eventbridge.stop()
        if self.one_time_schedules is not None:
            self.one_time_schedules.stop()
        if self.schedules is not None:
            self.schedules.stop()
        if self.environments is not None:
            self.environments.close()  # in-flight invocations fail fast; children exit on EOF
            close_preloaders()
        for poller in self.pollers:
            poller.stop()
        self.pollers.clear()
        self.stream_readers.clear()
        for name in ("public_front", "front"):
            front = getattr(self, name, None)
            if front is not None:
                front.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._server_thread is not None:
                self._server_thread.join(timeout=5)
            self._server = self._server_thread = None
        hooks.ACTIVE.clock = hooks.ACTIVE.ses = hooks.ACTIVE.on_sqs_mapping = hooks.ACTIVE.invoker = None
        hooks.ACTIVE.schedules = None
        hooks.ACTIVE.on_stream_mapping = None
        hooks.ACTIVE.port = None
        reset_clients()
        reset_cache()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def stack_outputs(self) -> dict[str, str]:
        """Outputs of the stack the runtime registers as ``specs.STACK_NAME`` (local_aws.cfn_stack):
        ``specs.stack_outputs()`` keys and ``specs.API_URL_OUTPUT`` (the https front), local values."""
        if self.deployment is None:
            raise RuntimeError("the local runtime has not deployed the artifact yet")
        return self.deployment.template.outputs()  # the synthesized template's, resolved locally

    def _write_state(self) -> None:
        # Atomically (tools poll for this file and must never read it half-written), and
        # readable by its owner only: it holds the API key.
        write_private(self.state_dir / STATE_FILE, json.dumps(self.describe(), indent=2).encode())

    def describe(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "api_url": self.api_url,
            "public_url": self.public_url,
            "tls_cert": str(self.tls.cert),
            "api_key": self.api_key,
            "region": self.config.region,
            "started_in_s": round(self.started_in_s, 3),
            "lambdas": "artifact",
            "template": str(self.artifact.template_path),
            "logs": str(self.logs_dir),
            "outbox": str(self.outbox),
            "pid": os.getpid(),
            "tables": self.resources.tables,
            "functions": {n: f.name for n, f in self.resources.functions.items()},
        }

    # ----- moto internals the runtime drives ---------------------------------------------
    def _backend(self, service: str) -> Any:
        from moto.backends import get_backend

        return get_backend(service)[ACCOUNT_ID][self.config.region]  # type: ignore[call-overload]

    def _reputation_alarms(self, template: Any) -> None:
        """The template's alarms on the sets' reputation metrics: created in the emulated
        CloudWatch (where `mailstep reputation status` reads their thresholds) and evaluated by
        the local SES's reputation monitor (local_aws/reputation.py)."""
        from local_aws.reputation import NAMESPACE, SET_DIMENSION, alarms_of

        cloudwatch = self.aws.client("cloudwatch")
        for alarm in alarms_of(template):
            cloudwatch.put_metric_alarm(
                AlarmName=alarm.name,
                AlarmDescription=alarm.description,
                Namespace=NAMESPACE,
                MetricName=alarm.metric,
                Dimensions=[{"Name": SET_DIMENSION, "Value": alarm.configuration_set}],
                Statistic="Maximum",
                Period=alarm.period,
                EvaluationPeriods=1,
                Threshold=alarm.threshold,
                ComparisonOperator="GreaterThanThreshold",
                TreatMissingData="notBreaching",
                AlarmActions=alarm.actions,
            )
            self.ses.reputation.watch(alarm)

    def _put_reputation_metric(self, configuration_set: str, metric: str, value: float) -> None:
        from local_aws.reputation import NAMESPACE, SET_DIMENSION

        self._backend("cloudwatch").put_metric_data(
            NAMESPACE,
            [
                {
                    "MetricName": metric,
                    "Value": value,
                    "Unit": "None",
                    "Dimensions": [{"Name": SET_DIMENSION, "Value": configuration_set}],
                }
            ],
        )

    def _set_alarm_state(self, name: str, state: str, reason: str) -> None:
        self._backend("cloudwatch").set_alarm_state(name, reason, None, state)

    def _publish_sns(self, topic_arn: str, message: str) -> None:
        self._backend("sns").topics[topic_arn].publish(message)

    def _start_poller(self, esm: Any, queue: Any) -> None:
        """Like Lambda's SQS poller: as many batches in flight as the mapping's
        MaximumConcurrency (LOCAL_MAPPING_CONCURRENCY when it sets none), at most the
        function's execution environments. Pollers share a
        receive lock, and a received message stays hidden until its batch is processed."""
        function = self._backend("lambda").get_function(esm.function_arn)
        receive_lock = threading.Lock()
        scaling = esm.scaling_config or {}
        concurrency = int(scaling.get("MaximumConcurrency") or LOCAL_MAPPING_CONCURRENCY)
        # no more batches in flight than a function has execution environments (no spec'd
        # function reserves concurrency, so each has DEFAULT_CONCURRENCY): a poller beyond that
        # would only wait for one (docs/broadcasts.md, "Sizing the workers")
        concurrency = min(concurrency, DEFAULT_CONCURRENCY)
        for _ in range(concurrency):
            poller = SqsPoller(
                sqs_backend=self._backend("sqs"),
                queue_name=queue.name,
                queue_arn=queue.queue_arn,
                region=self.config.region,
                function=function,
                batch_size=int(esm.batch_size or 10),
                counts=self.poller_counts,
                receive_lock=receive_lock,
                batching_window_s=float(esm.max_batch_window or 0),
            )
            with self._lock:
                self.pollers.append(poller)
            poller.start()

    def _start_stream_poller(self, esm: Any, table: Any) -> None:
        """Like Lambda's DynamoDB stream poller: one batch at a time per shard, in order, through
        the mapping's filter criteria, retried and bisected as the mapping says. Each mapping of a
        table's stream reads every record (``local_aws.streams.ShardReaders``); DynamoDB Streams
        allows two readers per shard at once, as here."""
        with self._lock:
            readers = self.stream_readers.get(id(table.stream_shard))
            if readers is None:
                readers = ShardReaders(table.stream_shard, lock=hooks.STREAM_LOCK, forget=True)
                self.stream_readers[id(table.stream_shard)] = readers
            elif len(readers.positions) >= STREAM_READERS_PER_SHARD:
                raise ValueError(f"a third event source mapping on the stream of table {table.name}")
        patterns = [json.loads(f["Pattern"]) for f in (esm.filter_criteria or {}).get("Filters", [])]
        retries = esm.max_retry_attempts
        function = self._backend("lambda").get_function(esm.function_arn)
        destination = ((esm.destination_config or {}).get("OnFailure") or {}).get("Destination")
        poller = StreamPoller(
            shard=table.stream_shard,
            stream_arn=esm.event_source_arn,
            function=self._backend("lambda").get_function(esm.function_arn),
            invoke=invoke,
            batch_size=int(esm.batch_size or 100),
            patterns=patterns,
            retry_attempts=int(retries) if retries is not None and int(retries) >= 0 else 10_000,
            bisect=bool(esm.bisect_on_error),
            readers=readers,
            batching_window_s=float(esm.max_batch_window or 0),
            on_failure=(
                (lambda record: self._send_failure(function.function_name, destination, record))
                if destination
                else None
            ),
        )
        with self._lock:
            self.pollers.append(poller)
        poller.start()

    def function(self, name: str) -> Any:
        """The moto ``LambdaFunction`` of a spec'd function (by spec name) or a physical name."""
        spec = next((f for f in specs.FUNCTIONS if f.name == name), None)
        return self._backend("lambda").get_function(local_function_name(spec) if spec else name)

    def _execution_statuses(self) -> list[tuple[str, str]]:
        from moto.stepfunctions.responses import get_backend  # the one the server's API uses

        machines = list(get_backend(ACCOUNT_ID, self.config.region).state_machines)
        return [(e.execution_arn, str(e.status)) for m in machines for e in list(m.executions)]

    def _authorize_role(self, role_arn: str, action: str, resource: str) -> bool:
        """A service's request with a role of the template (the scheduler role): its inline
        policies in the emulated IAM decide (read in process: no request of anyone's)."""
        from moto.iam.models import iam_backends

        policy = None
        if self.config.enforce_iam:
            roles = iam_backends[ACCOUNT_ID]["aws"].roles.values()  # IAM is global: one per partition
            role = next((r for r in roles if r.arn == role_arn), None)
            if role is not None:
                policy = []
                for document in role.policies.values():
                    found = (json.loads(document) if isinstance(document, str) else document)["Statement"]
                    policy += found if isinstance(found, list) else [found]
        assert self.environments is not None
        return self.environments.authorize_role(role_arn, policy, action, resource)

    def _delete_schedule(self, group: str, name: str) -> None:
        """EventBridge Scheduler deletes a completed schedule itself (no API request of anyone's)."""
        from moto.scheduler.models import scheduler_backends

        scheduler_backends[ACCOUNT_ID][self.config.region].delete_schedule(group, name)

    def _machine_waiting_on(self, token: str) -> str | None:
        """The state machine of the execution that issued the task ``token`` (running or not)."""
        from moto.stepfunctions.responses import get_backend

        for machine in list(get_backend(ACCOUNT_ID, self.config.region).state_machines):
            for execution in list(machine.executions):
                worker = getattr(execution, "exec_worker", None)
                if worker is not None and worker.env.callback_pool_manager.get(token) is not None:
                    return str(machine.arn)
        return None

    def _send_failure(self, function_name: str, destination: str, record: dict[str, Any]) -> None:
        """Send an on-failure record to an SQS destination as the Lambda service does: with the
        function's execution role (sqs:SendMessage on the queue, recorded like the function's own
        requests for the IAM report), dropped with a warning when the role may not."""
        if self.environments is not None and not self.environments.authorize_service(
            function_name, "sqs:SendMessage", destination
        ):
            logger.warning("on-failure record dropped: the role may not send it", destination=destination)
            return
        name = destination.rsplit(":", 1)[-1]
        sqs = self.aws.client("sqs")
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps(record))

    def _invoke_function(self, name: str, event: dict[str, Any]) -> bool:
        """Invoke a function by physical name (EventBridge targets): True when it errored."""
        return invoke(self._backend("lambda").get_function(name), event)[1]

    def invoke_spec(self, spec: specs.FunctionSpec, event: dict[str, Any]) -> tuple[Any, bool]:
        return invoke(self.function(spec.name), event)

    def status(self) -> dict[str, Any]:
        return {
            "clock": {
                "advanced_s": self.clock.advanced_s,
                "waits": len(self.clock.waits),
                "speed": self.clock.speed,
                "paused": self.clock.paused,
                "held": self.clock.held,
                "queue_delays": len(self.clock.delays),
                "queue_delay_s": sum(self.clock.delays),
                "calendar": self.clock.calendar_now().isoformat(timespec="seconds"),
                "calendar_offset_s": self.clock.calendar_offset_s,
            },
            "lambda": {
                "invocations": dict(STATS.invocations),
                "errors": dict(STATS.errors),
                "environments": self.environments.stats() if self.environments else {},
            },
            "eventbridge": {
                "delivered": self.eventbridge.delivered if self.eventbridge else 0,
                "scheduled": self.schedules.delivered if self.schedules else 0,
                # one-time schedules (callback Tasks) that fired, by outcome
                "one_time": dict(Counter(f.outcome.split(":")[0] for f in self.one_time_schedules.fired))
                if self.one_time_schedules is not None
                else {},
            },
            "ses": {
                "sends": self.ses.sends,
                "events": len(self.ses.events),
                "refused_unverified": self.ses.refused_unverified,
                "refused_daily_quota": self.ses.refused_daily_quota,
                "pending_identities": sorted(self.ses.pending_identities),
                "reputation": self.ses.reputation.counts(),  # per set: what its rates count
                **self.ses.account()["SendQuota"],
            },
            "http": {"requests": self.front.stats.requests},
        }

    def iam_report(self) -> dict[str, Any]:
        """The AWS requests the functions made (IAM action, resource, allowed, count) and the
        grants of the template's role policies that none of them used so far."""
        if self.environments is None:
            return {"calls": [], "grants": [], "unused_grants": []}
        # Used by services for the function, not by its code: log delivery, SQS and stream event sources.
        service_actions = ("logs:*", *specs.EVENT_SOURCE_ACTIONS, *specs.STREAM_SOURCE_ACTIONS)
        return {
            "calls": self.environments.recorded(),
            "grants": self.environments.grants(ignore=service_actions),
            "unused_grants": self.environments.unused_grants(ignore=service_actions),
        }

    def _kill_environment(self, body: bytes) -> tuple[int, Any]:
        """``POST /_local/environments/kill`` {function}: SIGKILL one execution environment of
        that function (spec name or physical name) that is in an invocation, as a crashed
        Lambda host would; 409 when none is running."""
        name = _json_field(body, "function", str, "function must be a name")
        if self.environments is None:
            return 409, {"error": {"code": "no_environments", "message": "the functions are not deployed"}}
        spec = next((f for f in specs.FUNCTIONS if f.name == name), None)
        physical = local_function_name(spec) if spec else name
        pid = self.environments.kill_one(physical)
        if pid is None:
            return 409, {
                "error": {"code": "not_running", "message": f"no environment of {physical} is running"}
            }
        return 200, {"function": physical, "killed_pid": pid}

    def _advance_calendar(self, body: bytes) -> tuple[int, Any]:
        """``POST /_local/calendar`` {advance_days}: move the runtime's calendar that many days
        ahead (0 < days <= 3650) and fire every scheduled rule time it passes, in order; answers
        the new calendar and each delivery (rule, time, errored)."""
        days = _json_field(body, "advance_days", object, "advance_days must be a number of days")
        if isinstance(days, bool) or not isinstance(days, int | float) or not 0 < days <= 3650:
            raise _InvalidRequest("advance_days must be more than 0 and at most 3650")
        _, after = self.clock.advance_calendar(float(days) * 86400)
        ses_events.CALENDAR["offset_s"] = self.clock.calendar_offset_s  # the local SES's timestamps
        runs = self.schedules.fire_until(after) if self.schedules is not None else []
        return 200, {"calendar": after.isoformat(timespec="seconds"), "runs": runs}

    def _hold_sending_identity(self) -> None:
        """The sending domain (the functions' DEFAULT_FROM, else the built-in sender's) exists as
        an SES identity that waits for verification (``mailstep dev --identity-pending``)."""
        from email.utils import parseaddr

        from shared.core.settings import Settings

        assert self.deployment is not None
        environments = [spec.environment for spec in self.deployment.environments.values()]
        froms = [env["DEFAULT_FROM"] for env in environments if env.get("DEFAULT_FROM")]
        address = parseaddr(froms[0] if froms else str(Settings.model_fields["default_from"].default))[1]
        domain = address.rsplit("@", 1)[-1].lower()
        try:
            self.aws.client("sesv2").create_email_identity(EmailIdentity=domain)
        except Exception as exc:  # it exists already: it still waits
            if "AlreadyExists" not in type(exc).__name__ and "AlreadyExists" not in str(exc):
                raise
        self.ses.hold_identity(domain)

    def _publish_ses_event(self, body: bytes) -> tuple[int, Any]:
        """``POST /_local/ses/events`` {record}: an SES event record (``mailstep local bounce``,
        ``complain``, ``open``, ``click``) published as the local SES publishes its own: to its
        configuration set's destinations, and counted by the reputation monitor."""
        record = _json_field(body, "record", dict, "record must be an SES event record (a JSON object)")
        mail = record.get("mail")
        tags = mail.get("tags") if isinstance(mail, dict) else None
        if not record.get("eventType") or not isinstance(tags, dict):
            raise _InvalidRequest("record needs eventType and a mail object with its tags")
        return 200, {"topics": self.ses.emit(record)}

    def _control(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        """``GET /_local/status``; ``POST /_local/ses`` {max_send_rate, max_24_hour_send};
        ``POST /_local/clock`` {paused: true|false} (a paused clock holds every Wait and Retry).
        A body these cannot use is a 400 ``invalid_request`` with the reason."""
        try:
            return self._route_control(method, path, body)
        except _InvalidRequest as exc:
            return 400, {"error": {"code": "invalid_request", "message": str(exc)}}

    def _route_control(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        if method == "GET" and path == "/_local/status":
            return 200, self.status()
        if method == "GET" and path == "/_local/iam":
            return 200, self.iam_report()
        if method == "POST" and path == "/_local/environments/kill":
            return self._kill_environment(body)
        if method == "POST" and path == "/_local/clock":
            if _json_field(body, "paused", bool, "paused must be true or false"):
                self.clock.pause()
            else:
                self.clock.resume()
            return 200, self.status()["clock"]
        if method == "POST" and path == "/_local/calendar":
            return self._advance_calendar(body)
        if method == "POST" and path == "/_local/ses/events":
            return self._publish_ses_event(body)
        if method == "POST" and path == "/_local/ses":
            try:
                values = json.loads(body or b"{}")
                if values.get("verify") is not None:
                    waiting = self.ses.verify_identity(str(values["verify"]))
                    return 200, {"identity": str(values["verify"]).lower(), "was_pending": waiting}
                self.ses.configure(
                    max_send_rate=values.get("max_send_rate"), max_24_hour_send=values.get("max_24_hour_send")
                )
                if values.get("reputation_min_sends") is not None:
                    self.ses.reputation.min_sends = int(values["reputation_min_sends"])
                if values.get("reputation_alarms") is not None:
                    self.ses.reputation.alarms_on = bool(values["reputation_alarms"])
            except (ValueError, TypeError, AttributeError) as exc:
                raise _InvalidRequest(str(exc)) from None
            return 200, self.ses.account()["SendQuota"]
        return 404, {"message": "Not Found"}


class _InvalidRequest(Exception):
    """A control request whose body cannot be used (a 400 with this message)."""


def _json_field(body: bytes, name: str, kind: type, wrong_type: str) -> Any:
    """Field ``name`` of a JSON object body, of type ``kind``; else :class:`_InvalidRequest`
    (``<name> is required``, ``wrong_type``, or why the body is no JSON object)."""
    try:
        value = json.loads(body or b"{}")[name]
    except KeyError:
        raise _InvalidRequest(f"{name} is required") from None
    except (ValueError, TypeError) as exc:
        raise _InvalidRequest(str(exc)) from None
    if not isinstance(value, kind):
        raise _InvalidRequest(wrong_type)
    return value
