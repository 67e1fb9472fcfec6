"""Settings are read from the environment once, at the boundary, into this model.

The names of the variables live in ``shared.specs.ENV`` so the CDK stack, the local
runtime and the Lambdas agree on them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    table_name: str
    events_table_name: str
    api_key_secret: str = ""
    data_ttl_days: int = Field(default=180, ge=1, le=3650)
    idempotency_ttl_seconds: int = Field(default=86400, ge=60)
    max_body_bytes: int = Field(default=256 * 1024, ge=1024)
    configuration_set: str = ""  # SES configuration set every send names (event publishing)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        from shared.specs import ENV

        source = os.environ if env is None else env
        values = {field: source[name] for field, name in ENV.items() if name in source}
        return cls.model_validate(values)
