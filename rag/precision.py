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

from rag import config_keys
from rag.errors import ConfigError

# torch's dtype of each precision (torch imported where a dtype is used: the config check stays light)
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
assert set(DTYPES) == set(config_keys.PRECISIONS), "a precision of rag/config_keys.py without its dtype"


def check(precision: str, device: str | None = None) -> None:
    """The config error for a precision that is not one of config key ``precision``'s or that
    ``device`` cannot run (None: any device)."""
    choices = list(config_keys.PRECISIONS)
    if precision not in choices:
        raise ConfigError(f"config key 'precision': {precision!r} is not one of {choices}")
    if precision == "fp16" and device not in (None, "cuda"):
        raise ConfigError(f"config key 'precision': fp16 needs device: cuda (fp16 kernels and a gradient scaler); "
                          f"with device: {device} use bf16 or fp32")


def autocast(device_type: str, precision: str):
    """The autocast context of ``precision`` on ``device_type`` (a no-op context for fp32)."""
    import torch

    check(precision, device_type)
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=getattr(torch, DTYPES[precision]))


def full_precision(device_type: str):
    """Switch autocast off inside an autocast region (the fp32 parts: doc scores, marginalisation);
    a no-op context where autocast is not on."""
    import torch

    if not torch.is_autocast_enabled(device_type):
        return contextlib.nullcontext()
    return torch.autocast(device_type, enabled=False)


def grad_scaler(device_type: str, precision: str) -> torch.amp.GradScaler | None:
    """A gradient scaler for fp16 (None otherwise: bf16 has fp32's exponent range, fp32 needs none)."""
    import torch

    check(precision, device_type)
    return torch.amp.GradScaler(device_type) if precision == "fp16" else None
