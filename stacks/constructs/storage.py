"""Storage: the DynamoDB tables described by ``shared.core.specs.TABLES``."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from shared.core import specs
from stacks.config import MailstepConfig
from stacks.constructs.resources import pin_logical_id


def _string(name: str) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=name, type=dynamodb.AttributeType.STRING)


class Storage(Construct):
    """On-demand tables with PITR, TTL on ``ttl``, AWS-managed encryption, retained on delete, and
    the change stream their spec asks for (webhooks read it). With
    ``mailstep:expectedPeakMailsPerSecond`` set, a table that needs more than a new table's
    throughput for that peak is pre-warmed (``WarmThroughput``; docs/deploy.md)."""

    def __init__(self, scope: Construct, construct_id: str, *, config: MailstepConfig | None = None) -> None:
        super().__init__(scope, construct_id)
        warm = config.warm_throughput() if config else {}
        self.tables = {spec: self._table(spec, warm.get(spec.id)) for spec in specs.TABLES}

    def _table(self, spec: specs.TableSpec, warm: tuple[int, int] | None) -> dynamodb.Table:
        table = dynamodb.Table(
            self,
            spec.id,
            partition_key=_string(spec.partition_key),
            sort_key=_string(spec.sort_key),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=spec.ttl_attribute,
            removal_policy=RemovalPolicy.RETAIN,
            stream=dynamodb.StreamViewType(spec.stream) if spec.stream else None,
            warm_throughput=(
                dynamodb.WarmThroughput(write_units_per_second=warm[0], read_units_per_second=warm[1])
                if warm
                else None
            ),
        )
        for gsi in spec.gsis:
            table.add_global_secondary_index(
                index_name=gsi.name,
                partition_key=_string(gsi.partition_key),
                sort_key=_string(gsi.sort_key),
                projection_type=dynamodb.ProjectionType.ALL,
            )
        pin_logical_id(table, spec.id)
        return table
