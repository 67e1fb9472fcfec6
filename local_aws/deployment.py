"""Deploy the synthesized template's compute onto the emulated account, as CloudFormation would.

The data and messaging resources come from the specs (``local_aws.provision``: moto's
CloudFormation skips too many resource types to deploy the template itself); an infra test
proves specs and template agree. Everything that decides how the code runs comes from the
template, resolved to those resources (``local_aws.template``):

- every ``AWS::IAM::Role`` with its policies (recorded in moto's IAM for inspection, and
  enforced by the execution environments);
- every ``AWS::Lambda::Function``: handler, runtime, memory, timeout, environment, role;
- every ``AWS::Lambda::EventSourceMapping`` (batch size, concurrency, batching window, on-failure
  destination);
- every ``AWS::StepFunctions::StateMachine`` (definition with its substitutions, role).

:func:`deploy` returns the :class:`~local_aws.environments.EnvironmentSpec` of each function.
Requests go through the ``aws`` client factory the caller gives (the local runtime's, for its
endpoint); without one, the environment's clients.
"""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_aws.artifact import Artifact
from local_aws.environments import DEFAULT_CONCURRENCY, EnvironmentSpec
from local_aws.provision import LocalFunction, LocalResources, local_function_name, placeholder_code
from local_aws.template import LocalTemplate
from shared.core import specs
from shared.core.aws import ClientFactory


@dataclass(frozen=True)
class Deployment:
    template: LocalTemplate
    functions: dict[str, LocalFunction]  # spec name -> function
    environments: dict[str, EnvironmentSpec]  # physical function name -> environment spec


def _arn(template: LocalTemplate, service: str, resource: str) -> str:
    return f"arn:aws:{service}:{template.region}:{template.account}:{resource}"


def bind(
    template: LocalTemplate, resources: LocalResources, public_url: str, *, aws: ClientFactory | None = None
) -> None:
    """Give every template resource the local runtime creates its local physical values."""
    aws = aws or ClientFactory()
    ddb = aws.client("dynamodb")
    for table in specs.TABLES:
        name = resources.tables[table.setting]
        stream = ddb.describe_table(TableName=name)["Table"].get("LatestStreamArn") if table.stream else None
        attributes = {"StreamArn": stream} if stream else {}
        template.bind(table.id, Ref=name, Arn=_arn(template, "dynamodb", f"table/{name}"), **attributes)
    sm = aws.client("secretsmanager")
    for secret in specs.SECRETS:
        arn = sm.describe_secret(SecretId=resources.secrets[secret.setting])["ARN"]
        template.bind(secret.id, Ref=arn, Id=arn)
    queue_specs = {q.id: q for q in specs.QUEUES}
    for queue_id, queue in resources.queues.items():
        name = queue_specs[queue_id].local_name if queue_id in queue_specs else queue.url.rsplit("/", 1)[-1]
        template.bind(queue_id, Ref=queue.url, Arn=queue.arn, QueueUrl=queue.url, QueueName=name)
        dlq_name = queue.dlq_url.rsplit("/", 1)[-1]
        template.bind(
            f"{queue_id}DeadLetters",
            Ref=queue.dlq_url,
            Arn=queue.dlq_arn,
            QueueUrl=queue.dlq_url,
            QueueName=dlq_name,
        )
    for queue_id, failures in resources.failure_queues.items():
        name = failures.url.rsplit("/", 1)[-1]
        template.bind(queue_id, Ref=failures.url, Arn=failures.arn, QueueUrl=failures.url, QueueName=name)
    for topic_id, arn in resources.topics.items():
        template.bind(topic_id, Ref=arn, TopicArn=arn, TopicName=arn.rsplit(":", 1)[-1])
    for configuration_set in specs.CONFIGURATION_SETS:
        template.bind(configuration_set.id, Ref=resources.configuration_sets[configuration_set.setting])
    for logical_id in template.of_type("AWS::ApiGatewayV2::Api"):
        template.bind(logical_id, Ref="local", ApiId="local", ApiEndpoint=public_url)
    for logical_id in template.of_type("AWS::IAM::Role"):
        name = logical_id[:64]
        template.bind(logical_id, Ref=name, Arn=f"arn:aws:iam::{template.account}:role/{name}", RoleId=name)
    for logical_id in template.of_type("AWS::Logs::LogGroup"):
        template.bind(logical_id, Ref=logical_id, Arn=_arn(template, "logs", f"log-group:{logical_id}:*"))
    by_handler = {spec.handler: spec for spec in specs.FUNCTIONS}
    for logical_id, resource in template.of_type("AWS::Lambda::Function").items():
        spec = by_handler.get(resource["Properties"]["Handler"])
        if spec is None:
            raise ValueError(
                f"function {logical_id} has a handler no spec names: {resource['Properties']['Handler']}"
            )
        name = local_function_name(spec)
        template.bind(logical_id, Ref=name, Arn=_arn(template, "lambda", f"function:{name}"))
    for logical_id, resource in template.of_type("AWS::StepFunctions::StateMachine").items():
        name = str(resource["Properties"].get("StateMachineName") or f"{logical_id}-local")
        arn = _arn(template, "states", f"stateMachine:{name}")
        template.bind(logical_id, Ref=arn, Arn=arn, Name=name)
    for logical_id, resource in template.of_type("AWS::Scheduler::ScheduleGroup").items():
        name = str(resource["Properties"]["Name"])
        arn = _arn(template, "scheduler", f"schedule-group/{name}")
        template.bind(logical_id, Ref=name, Arn=arn)
    for logical_id in template.of_type("AWS::S3::Bucket"):
        name = f"{template.stack_name}-{logical_id}".lower()[:63]
        aws.client("s3").create_bucket(Bucket=name)
        template.bind(logical_id, Ref=name, Arn=f"arn:aws:s3:::{name}", DomainName=f"{name}.s3.amazonaws.com")


def _roles(template: LocalTemplate, aws: ClientFactory) -> None:
    iam = aws.client("iam")
    for logical_id, resource in template.of_type("AWS::IAM::Role").items():
        name = template.physical[logical_id]["Ref"]
        trust = template.resolve(resource["Properties"].get("AssumeRolePolicyDocument", {}))
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))
        statements = template.role_policy(logical_id)
        if statements:
            document = {"Version": "2012-10-17", "Statement": statements}
            iam.put_role_policy(RoleName=name, PolicyName="template", PolicyDocument=json.dumps(document))


def lambda_environment(
    config_env: dict[str, str],
    *,
    name: str,
    handler: str,
    memory_mb: int,
    artifact: Artifact,
    endpoint: str,
    region: str,
) -> dict[str, str]:
    """The template's variables plus those the Lambda service sets, pointed at the local endpoint."""
    return {
        **config_env,
        "AWS_LAMBDA_FUNCTION_NAME": name,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb),
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{name}",
        "AWS_EXECUTION_ENV": f"AWS_Lambda_{specs.LAMBDA_RUNTIME}",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "LAMBDA_TASK_ROOT": str(artifact.asset_dir),
        "LAMBDA_RUNTIME_DIR": str(artifact.runtime_dir),
        "_HANDLER": handler,
        "TZ": ":UTC",
        "LANG": "en_US.UTF-8",
        "AWS_ACCESS_KEY_ID": "mailstep-local",
        "AWS_SECRET_ACCESS_KEY": "mailstep-local",
        "AWS_SESSION_TOKEN": "mailstep-local",
        "AWS_ENDPOINT_URL": endpoint,
    }


def role_statements(role_arn: str, aws: ClientFactory | None = None) -> list[dict[str, Any]] | None:
    """The inline policy statements of a role in the emulated IAM; None when it has none there."""
    iam = (aws or ClientFactory()).client("iam")
    name = role_arn.rsplit("/", 1)[-1]
    try:
        names = iam.list_role_policies(RoleName=name)["PolicyNames"]
    except iam.exceptions.NoSuchEntityException:
        return None
    statements: list[dict[str, Any]] = []
    for policy in names:
        document = iam.get_role_policy(RoleName=name, PolicyName=policy)["PolicyDocument"]
        document = json.loads(document) if isinstance(document, str) else document
        found = document.get("Statement", [])
        statements += found if isinstance(found, list) else [found]
    return statements


def uploaded_function(
    function: Any,
    artifact: Artifact,
    *,
    endpoint: str,
    region: str,
    account: str,
    logs_dir: Path,
    aws: ClientFactory | None = None,
) -> EnvironmentSpec:
    """A function created through the Lambda API (not from the template): it runs from the
    code zip it was created with, with the same runtime, and its role's inline policies from
    the emulated IAM are enforced (a role unknown there is not checked)."""
    code_dir = logs_dir.parent / "code" / function.function_name
    if not code_dir.exists():
        with zipfile.ZipFile(io.BytesIO(function.code_bytes)) as archive:
            archive.extractall(code_dir)  # noqa: S202 - code this local account was given
    env = {str(k): str(v) for k, v in (function.environment_vars or {}).items()}
    return EnvironmentSpec(
        function_name=function.function_name,
        handler=function.handler,
        python=artifact.python,
        import_path=[str(code_dir), str(artifact.runtime_dir)],
        environment=lambda_environment(
            env,
            name=function.function_name,
            handler=function.handler,
            memory_mb=int(function.memory_size),
            artifact=dataclasses.replace(artifact, asset_dir=code_dir),
            endpoint=endpoint,
            region=region,
        ),
        policy=role_statements(function.role, aws),
        role_arn=function.role,
        region=region,
        account=account,
        timeout_s=int(function.timeout),
        memory_mb=int(function.memory_size),
        log_file=logs_dir / f"{function.function_name}.log",
    )


def deploy(
    template: LocalTemplate,
    resources: LocalResources,
    artifact: Artifact,
    *,
    endpoint: str,
    logs_dir: Path,
    enforce_iam: bool = True,
    aws: ClientFactory | None = None,
) -> Deployment:
    aws = aws or ClientFactory()
    _roles(template, aws)
    lam = aws.client("lambda")
    configs = template.functions()
    by_logical = {c.logical_id: c for c in configs.values()}
    functions: dict[str, LocalFunction] = {}
    environments: dict[str, EnvironmentSpec] = {}
    for spec in specs.FUNCTIONS:
        config = configs.get(spec.handler)
        if config is None:
            raise ValueError(f"the synthesized template has no function with handler {spec.handler}")
        name = local_function_name(spec)
        arn = lam.create_function(
            FunctionName=name,
            Runtime=config.runtime,
            Role=config.role_arn,
            Handler=config.handler,
            Code={"ZipFile": placeholder_code()},
            Description=spec.description,
            Timeout=config.timeout_s,
            MemorySize=config.memory_mb,
            Environment={"Variables": config.environment},
        )["FunctionArn"]
        functions[spec.name] = LocalFunction(name=name, arn=arn, spec=spec, env=config.environment)
        environments[name] = EnvironmentSpec(
            function_name=name,
            handler=config.handler,
            python=artifact.python,
            import_path=artifact.import_path,
            environment=lambda_environment(
                config.environment,
                name=name,
                handler=config.handler,
                memory_mb=config.memory_mb,
                artifact=artifact,
                endpoint=endpoint,
                region=template.region,
            ),
            policy=config.policy if enforce_iam else None,
            role_arn=config.role_arn,
            region=template.region,
            account=template.account,
            timeout_s=config.timeout_s,
            memory_mb=config.memory_mb,
            log_file=logs_dir / f"{name}.log",
            max_environments=config.reserved_concurrency or DEFAULT_CONCURRENCY,
        )
    for mapping in template.event_source_mappings():
        kwargs: dict[str, Any] = {
            "FunctionName": template.physical[mapping.function_logical_id]["Ref"],
            "EventSourceArn": mapping.queue_arn,
            "BatchSize": mapping.batch_size,
        }
        if mapping.report_batch_item_failures:
            kwargs["FunctionResponseTypes"] = ["ReportBatchItemFailures"]
        if mapping.max_batching_window_s:
            kwargs["MaximumBatchingWindowInSeconds"] = mapping.max_batching_window_s
        if mapping.max_concurrency is not None:
            kwargs["ScalingConfig"] = {"MaximumConcurrency": mapping.max_concurrency}
        if mapping.starting_position:  # a DynamoDB stream source
            kwargs["StartingPosition"] = mapping.starting_position
            kwargs["BisectBatchOnFunctionError"] = mapping.bisect_batch_on_error
        if mapping.filter_criteria:
            kwargs["FilterCriteria"] = mapping.filter_criteria
        if mapping.max_retry_attempts is not None:
            kwargs["MaximumRetryAttempts"] = mapping.max_retry_attempts
        if mapping.on_failure:  # where a stream batch's on-failure record goes (local_aws.streams)
            kwargs["DestinationConfig"] = {"OnFailure": {"Destination": mapping.on_failure}}
        if mapping.function_logical_id not in by_logical:
            raise ValueError(f"event source mapping {mapping.logical_id} names an unknown function")
        lam.create_event_source_mapping(**kwargs)
    _state_machines(template, aws)
    for resource in template.of_type("AWS::Scheduler::ScheduleGroup").values():  # callback Tasks' schedules
        aws.client("scheduler").create_schedule_group(Name=str(resource["Properties"]["Name"]))
    return Deployment(template=template, functions=functions, environments=environments)


def _state_machines(template: LocalTemplate, aws: ClientFactory) -> None:
    sfn = aws.client("stepfunctions")
    for logical_id, resource in template.of_type("AWS::StepFunctions::StateMachine").items():
        properties = resource["Properties"]
        definition = str(template.resolve(properties["DefinitionString"]))
        for key, value in template.resolve(properties.get("DefinitionSubstitutions", {})).items():
            definition = definition.replace("${" + key + "}", str(value))
        sfn.create_state_machine(
            name=template.physical[logical_id]["Name"],
            definition=definition,
            roleArn=str(template.resolve(properties["RoleArn"])),
            type=properties.get("StateMachineType", "STANDARD"),
        )
