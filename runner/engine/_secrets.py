"""Secrets of one run: resolved when it starts or resumes, kept in memory only.

A workflow declares `secrets: [NAME, ...]` (values from the caller's `--secret` or
the environment) and `env: [NAME, ...]` (an allowlist of environment variables for
`{{ env.NAME }}`); its input schema may mark top-level properties `writeOnly: true`.
None of these values is ever written: the driver masks every recorded event with
`RunSecrets.mask_event` (each value becomes `***`, as GitHub Actions masks them),
so the trace, the state, artifacts, logs and anything folded from them hold the
mask, and prompts are masked before a model sees them. A writeOnly field is
recorded as `***` and put back from memory into the `input` templates see.

Because nothing is stored, a resumed run resolves everything again: declared
secrets from the environment (or `--secret`), writeOnly fields from `--secret
FIELD=...` (or the launching process's memory). A missing one is an `InputError`
before any node runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from runner._safety import (
    MASK,
    MIN_SECRET_CHARS,
    mask,
    mask_json,
    mask_values,
    secret_env_values,
)
from runner.compiler import WorkflowDefinition
from runner.errors import InputError

__all__ = ["MASK", "RunSecrets", "SecretMissing", "SecretSource", "resolve", "restore_input",
           "write_only_fields"]


class SecretMissing(InputError):
    """A secret or writeOnly value the run needs was not given; nothing was changed, and
    the run can start or resume once it is."""


@dataclass(frozen=True)
class SecretSource:
    """Where secret values come from: values given to this process (`--secret`, or a
    writeOnly field's value kept in memory since it was queued) before `environ`."""

    given: Mapping[str, str] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=dict)

    def lookup(self, name: str) -> str | None:
        value = self.given.get(name)
        return value if value is not None else self.environ.get(name)

    @cached_property
    def env_masked(self) -> tuple[str, ...]:
        """What every run masks of `environ` alone: its secret-named variables' values.
        Worked out once per source (a host's serves all its runs), not once per run."""
        return mask_values(secret_env_values(dict(self.environ)))

    @cached_property
    def plain(self) -> RunSecrets:
        """What `resolve` gives a run of a workflow that declares nothing secret
        (`WorkflowDefinition.declares_secrets` false): the environment's masks alone."""
        return RunSecrets(masked=self.env_masked)


NO_SOURCE = SecretSource()


@dataclass(frozen=True)
class RunSecrets:
    """The resolved values of one run and the strings to mask wherever it records."""

    secrets: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    hidden: Mapping[str, Any] = field(default_factory=dict)  # writeOnly field -> value
    masked: tuple[str, ...] = ()

    def mask(self, text: str) -> str:
        return mask(text, self.masked) if self.masked else text

    def mask_json(self, value: Any) -> Any:
        return mask_json(value, self.masked) if self.masked else value

    def with_values(self, values: list[str]) -> RunSecrets:
        """The same, also masking `values` (a shell action's secret-named env values)."""
        extra = mask_values(values)
        if not extra or set(extra) <= set(self.masked):
            return self
        return RunSecrets(self.secrets, self.env, self.hidden,
                          mask_values([*self.masked, *extra]))


EMPTY = RunSecrets()


def write_only_fields(definition: WorkflowDefinition) -> tuple[str, ...]:
    """Top-level input properties the schema marks `writeOnly: true`."""
    return definition.write_only


def split_input(definition: WorkflowDefinition, value: Any) -> tuple[Any, dict[str, Any]]:
    """`value` with its writeOnly fields replaced by `***`, and those fields' values."""
    fields = definition.write_only
    if not fields or not isinstance(value, dict):
        return value, {}
    hidden = {k: value[k] for k in fields if k in value and value[k] != MASK}
    stored = {k: (MASK if k in fields else v) for k, v in value.items()}
    return stored, hidden


def restore_input(value: Any, hidden: Mapping[str, Any]) -> Any:
    """`value` as recorded (writeOnly fields masked) with their real values put back."""
    if not hidden or not isinstance(value, dict):
        return value
    return {**value, **{k: v for k, v in hidden.items() if k in value}}


def resolve(definition: WorkflowDefinition, source: SecretSource, value: Any) -> RunSecrets:
    """Everything secret about one run of `definition` with input `value` (real, or as
    recorded with writeOnly fields masked). Raises InputError naming what is missing.
    A workflow that declares none of it gets `source.plain` (a caller that knows
    `definition.declares_secrets` is false takes that without the call)."""
    if not definition.declares_secrets:
        return source.plain
    secrets = _declared(definition, source) if definition.secrets else {}
    hidden = _hidden(definition, source, value) \
        if definition.write_only and isinstance(value, dict) else {}
    env = {n: v for n in definition.env if (v := source.environ.get(n)) is not None} \
        if definition.env else {}
    own = [*secrets.values(), *map(str, hidden.values())]
    masked = mask_values([*own, *secret_env_values(dict(source.environ))]) if own \
        else source.env_masked
    return RunSecrets(secrets, env, hidden, masked)


def _declared(definition: WorkflowDefinition, source: SecretSource) -> dict[str, str]:
    """The values of the workflow's `secrets:`, each there and long enough to mask."""
    missing = [n for n in definition.secrets if not source.lookup(n)]
    if missing:
        names = ", ".join(missing)
        raise SecretMissing(
            f"workflow '{definition.name}' needs secret{'s' if len(missing) > 1 else ''} "
            f"{names}: set {'them' if len(missing) > 1 else 'it'} in the environment or pass "
            f"--secret {missing[0]}=VALUE (or --secret {missing[0]}=@FILE)")
    secrets = {n: source.lookup(n) or "" for n in definition.secrets}
    short = [n for n, v in secrets.items() if len(v) < MIN_SECRET_CHARS]
    if short:
        raise InputError(f"secret {short[0]} is shorter than {MIN_SECRET_CHARS} characters; "
                         "so short a value cannot be masked in logs, use a real secret")
    return secrets


def _hidden(definition: WorkflowDefinition, source: SecretSource,
            value: dict[str, Any]) -> dict[str, Any]:
    """The real values of the writeOnly fields in `value` (given again when masked)."""
    hidden: dict[str, Any] = {}
    for name in definition.write_only:
        if name not in value:
            continue
        real = value[name]
        if real == MASK:
            given = source.given.get(name)
            if given is None:
                raise SecretMissing(
                    f"input field '{name}' is secret (writeOnly) and was kept nowhere; "
                    f"give it again with --secret {name}=VALUE")
            real = given
        if not isinstance(real, str) or len(real) < MIN_SECRET_CHARS:
            raise InputError(f"input field '{name}' is secret (writeOnly): it must be a "
                             f"string of at least {MIN_SECRET_CHARS} characters so it can "
                             "be masked")
        hidden[name] = real
    return hidden


def check_no_nul(what: str, text: str) -> str | None:
    """A clear message when `text` (bound for argv, env or cwd) holds a NUL byte."""
    if "\0" in text:
        return (f"{what} contains a NUL byte, which no program can receive; remove it from "
                "the input or template that produced it")
    return None
