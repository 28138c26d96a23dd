"""Find the ops that would stall an accelerator: a value read back to the host, or an output whose shape depends on the
data (docs/jsa.md#static-or-distinct-rows). Neither shows on the CPU, so they are found by name:

    with HostSyncCounter() as counter:
        model.training_loss(x, index)["loss"].backward()
    assert not counter.found, counter.found

A TorchDispatchMode sees the ops after autograd and decomposition (`F.one_hot` shows as `min`, `max`, `item`); CPU
host reads that bypass the dispatcher (`tolist`, `.numpy()`, `.cpu()`) are patched.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

# Ops whose result is read on the host (a Python number or bool): a sync on an accelerator.
HOST_READS = {
    aten._local_scalar_dense.default,  # .item(), bool(t), int(t), float(t)
    aten.is_nonzero.default,
    aten.equal.default,
    aten.allclose.default,
}
# Ops whose output shape depends on the values of their input: the host must read the size before allocating.
DATA_DEPENDENT_SHAPES = {
    "nonzero", "argwhere", "masked_select", "_unique", "_unique2", "unique_dim", "unique_consecutive",
    "unique_dim_consecutive", "bincount", "histc", "repeat_interleave", "_masked_scatter_backward",
}
INDEX_OPS = {"index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index", "_unsafe_index_put"}


def _bool_index(args: tuple) -> bool:
    """A boolean mask among an index op's indices (x[mask], x[mask] = v): its selected count is a data-dependent size."""
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (indices or ()) if i is not None)


class HostSyncCounter(TorchDispatchMode):
    """Records (op name, reason) for every host read or data-dependent shape while active; `found` lists them."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str]] = []
        self._patched: dict[str, Any] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (the dispatcher's signature)
        name = func.overloadpacket.__name__
        if func in HOST_READS:
            self.found.append((str(func), "reads a value to the host"))
        elif name in DATA_DEPENDENT_SHAPES:
            self.found.append((str(func), "output shape depends on the data"))
        elif name in INDEX_OPS and _bool_index(args):
            self.found.append((str(func), "boolean-mask indexing: output shape depends on the data"))
        elif name == "multinomial" and (args[1] if len(args) > 1 else kwargs.get("num_samples")) == 1:
            # one draw takes multinomial's fast path, which first checks the probabilities with an .item()
            self.found.append((str(func), "multinomial with one sample checks its input on the host"))
        return func(*args, **(kwargs or {}))

    def __enter__(self) -> "HostSyncCounter":
        for method in ("tolist", "numpy", "cpu"):
            original = getattr(torch.Tensor, method)
            self._patched[method] = original

            def recording(tensor: torch.Tensor, *args: Any, _original: Any = original, _method: str = method, **kwargs: Any) -> Any:
                self.found.append((f"Tensor.{_method}", "reads the tensor to the host"))
                return _original(tensor, *args, **kwargs)

            setattr(torch.Tensor, method, recording)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        for method, original in self._patched.items():
            setattr(torch.Tensor, method, original)
        self._patched.clear()
        return super().__exit__(*exc)
