"""Mixed precision: the config key ``precision`` (fp32 | bf16 | fp16) as ``torch.autocast``.

Weights, gradients and optimizer state stay fp32. Under bf16 or fp16 the generator's and the
question encoder's matrix multiplies run in that dtype (autocast); the doc scores d(z).q(x), the
log-probabilities and the RAG marginalisation are computed in fp32 (``rag.models.rag`` and
``rag.models.marginal`` cast before every logsumexp). fp16 trains with a gradient scaler
(``torch.amp.GradScaler``) and needs CUDA; CPU autocast runs bf16 (fp16 with ``device: cpu`` is a
config error, ``rag.config``). fp32 adds nothing to the code path: no autocast context at all.
"""

from __future__ import annotations

import contextlib

import torch

from rag.config import check_precision as check
from rag.config_keys import key

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
assert set(DTYPES) == set(key("precision")["enum"]), "a precision of rag/config_keys.py without its dtype"


def autocast(device_type: str, precision: str):
    """The autocast context of ``precision`` on ``device_type`` (a no-op context for fp32)."""
    check(precision, device_type)
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=DTYPES[precision])


def full_precision(device_type: str):
    """Switch autocast off inside an autocast region (the fp32 parts: doc scores, marginalisation);
    a no-op context where autocast is not on."""
    if not torch.is_autocast_enabled(device_type):
        return contextlib.nullcontext()
    return torch.autocast(device_type, enabled=False)


def grad_scaler(device_type: str, precision: str) -> torch.amp.GradScaler | None:
    """A gradient scaler for fp16 (None otherwise: bf16 has fp32's exponent range, fp32 needs none)."""
    check(precision, device_type)
    return torch.amp.GradScaler(device_type) if precision == "fp16" else None
