"""Safe error text for launch: the policy lives in `runner._safety` (DESIGN §6, §9).

Anything persisted in the store or shown to a model passes through `safe_message`:
token-like values and known secrets are replaced, the text is folded to one line
and cut to a strict byte limit. This module only re-exports those names so older
imports keep working; new code imports `runner._safety`.
"""

from __future__ import annotations

from runner._safety import MAX_SAFE_BYTES as MAX_SAFE_BYTES
from runner._safety import REDACTED as REDACTED
from runner._safety import bound as bound
from runner._safety import one_line as one_line
from runner._safety import redact as redact
from runner._safety import safe_message as safe_message
from runner._safety import secret_values as secret_values
