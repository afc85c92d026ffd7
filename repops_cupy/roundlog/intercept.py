"""Every torch op of a forward pass becomes a rounding site, and so does its backward.

:class:`RoundingMode` is a ``TorchFunctionMode``: while it is active, each call of a
torch function or tensor method (``F.linear``, ``F.layer_norm``, ``x + y``,
``F.scaled_dot_product_attention``, ``x.mean()``...) at the level the model code
wrote it is run by :class:`_RoundedOp`, a custom autograd Function that

- computes the op in float64 on detached copies of its inputs, keeping that small
  local graph;
- rounds each float64 output to float32 through the engine (site ``<op>:out<j>``);
- in backward, differentiates the local graph and rounds the gradient for each
  input that depends on the batch (site ``<op>:grad<k>``). Gradients for inputs that
  do not depend on the batch (parameters and what is computed from them alone)
  are partial sums over the micro-batch: they stay float64 and are rounded once
  per step, as parameter gradients, after all micro-batches.

So every intermediate value of forward and backward is float32-valued and the
float64 disagreement between machines never exceeds one op's own rounding error.
Views and copies (reshape, transpose, slicing, cat...) pass through unrounded:
they move float32 values without arithmetic. In-place ops and ops that draw from
torch's global generator are refused, naming the module; dropout draws its mask
from the job's counter-based RNG (:mod:`.dropout`).

``backend="numpy"`` routes the matrix products (linear, matmul, conv2d, attention)
through :mod:`.npbackend` inside the same sites. GELU of a batch-dependent tensor is the
project's own operator on every backend (:mod:`.own_ops`).
"""
from __future__ import annotations

import inspect
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from . import npbackend, own_ops
from .engine import RoundingEngine, RoundLogError
from .rounding import F64
from .thresholds import EXACT_OPS
from .tree import flatten as tree_flatten
from .tree import unflatten as tree_unflatten

BATCH_ATTR = "_roundlog_batch"
USES_ATTR = "_roundlog_uses"

_RENAMES = {
    "truediv": "div", "rtruediv": "rdiv", "radd": "add", "rmul": "mul", "rmatmul": "matmul",
    "rpow": "rpow", "floordiv": "floor_divide", "concat": "cat", "concatenate": "cat",
    "divide": "div", "multiply": "mul", "subtract": "sub", "absolute": "abs", "negative": "neg",
}

# results that are not tensors (or share storage without arithmetic): call as is
META = frozenset({
    "__get__", "size", "dim", "numel", "nelement", "ndimension", "stride", "is_contiguous", "data_ptr",
    "element_size", "__len__", "__bool__", "item", "tolist", "__repr__", "__format__", "is_floating_point",
    "is_complex", "get_device", "__hash__", "requires_grad_", "retain_grad", "register_hook", "type",
    "storage_offset", "untyped_storage", "__reduce_ex__", "__deepcopy__", "_is_view", "dim_order",
    "__iter__", "__index__", "__int__", "__float__", "__contains__", "numpy", "__array__", "__setstate__",
})
# views and copies: no arithmetic, exact backward (slices, transposes, concatenation)
PASSTHROUGH = frozenset({
    "view", "view_as", "reshape", "reshape_as", "transpose", "t", "permute", "squeeze", "unsqueeze",
    "flatten", "unflatten", "contiguous", "split", "chunk", "unbind", "narrow", "select", "__getitem__",
    "cat", "stack", "clone", "detach", "movedim", "swapaxes", "mT", "T",
})
# ops that draw from torch's global generator: no auditor could draw the same numbers
RANDOM = frozenset({
    "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "bernoulli", "multinomial",
    "normal", "poisson", "dropout1d", "dropout2d", "dropout3d", "feature_dropout", "alpha_dropout",
    "feature_alpha_dropout", "native_dropout", "rrelu",
})


def op_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or str(func)
    if name.startswith("__") and name.endswith("__") and name not in ("__getitem__", "__get__"):
        name = name[2:-2]
        if name.startswith("i") and name[1:] in ("add", "sub", "mul", "truediv", "matmul", "pow", "and", "or"):
            return "inplace_" + name[1:]
    return _RENAMES.get(name, name)


def mark_batch(t: torch.Tensor) -> torch.Tensor:
    """Declare a tensor as depending on the batch, with examples along dim 0."""
    setattr(t, BATCH_ATTR, True)
    return t


def is_batch(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and getattr(t, BATCH_ATTR, False)


def _count_uses(leaves) -> None:
    for t in leaves:
        if isinstance(t, torch.Tensor):
            uses = getattr(t, USES_ATTR, None)
            if uses is not None:
                uses[0] += 1
                if uses[0] == 2:  # a second reader: its gradient is a sum (the hook may come any time before backward)
                    engine = uses.pop()
                    t.register_hook(lambda g: engine.site("fan_in:grad", g, True, True))


def _round_fan_in(engine: RoundingEngine, t: torch.Tensor) -> None:
    """Round the gradient autograd sums for an output read by several ops (a residual
    stream, a tensor and its views): a fixed-order float64 sum of float32 values, the
    same bits everywhere, so an exact site. Single-use outputs need nothing, so the hook
    is registered only at the second use (:func:`_count_uses`)."""
    setattr(t, USES_ATTR, [0, engine])


_ENGINE = getattr(torch.autograd.Variable, "_execution_engine", None)


def _local_grads(outs: list, ins: list, gouts: list) -> tuple:
    """``torch.autograd.grad(outs, ins, gouts, allow_unused=True)``: the same engine call without
    grad's checks of the gradients' shapes and types, which cost about a tenth of a small op here
    (these gradients are autograd's own, for these outputs). torch.autograd.grad where torch
    has no such engine object."""
    if _ENGINE is None:
        return torch.autograd.grad(outs, ins, gouts, allow_unused=True)
    return _ENGINE.run_backward(tuple(outs), tuple(gouts), False, False, tuple(ins), True, False)


def _mark_outputs(out: Any) -> Any:
    for leaf in tree_flatten(out)[0]:
        if isinstance(leaf, torch.Tensor):
            mark_batch(leaf)
    return out


class _OpCall:
    """One intercepted call: the function, its argument structure, and what was seen."""

    def __init__(self, mode: "RoundingMode", func, name: str, args, kwargs):
        self.mode, self.func, self.name = mode, func, name
        self.leaves, self.spec = tree_flatten((args, kwargs))
        self.tensor_slots = [i for i, x in enumerate(self.leaves) if isinstance(x, torch.Tensor)]
        self.batch = [is_batch(self.leaves[i]) for i in self.tensor_slots]

    def tensors(self) -> list[torch.Tensor]:
        return [self.leaves[i] for i in self.tensor_slots]

    def compute(self, tensors: list[torch.Tensor]) -> Any:
        leaves = list(self.leaves)
        for slot, t in zip(self.tensor_slots, tensors):
            leaves[slot] = t
        args, kwargs = tree_unflatten(leaves, self.spec)
        route = npbackend.ROUTES.get(self.name) if self.mode.backend == "numpy" else None
        if route is not None:
            if getattr(self.func, "__name__", "") == "__rmatmul__":
                args = (args[1], args[0]) + tuple(args[2:])
            return route(*args, **kwargs)
        return self.func(*args, **kwargs)

    def round_outputs(self, out: Any) -> tuple[list, Any, list[int], list]:
        """Round float64 outputs through the engine; returns flat rounded outputs, spec, float
        slots, and the flat unrounded outputs."""
        flat, spec = tree_flatten(out)
        batch_dep = any(self.batch)
        floats = []
        rounded = []
        for j, o in enumerate(flat):
            if isinstance(o, torch.Tensor) and o.dtype == F64:
                floats.append(j)
                rounded.append(self.mode.engine.site(f"{self.name}:out{j}", o.detach(), batch_dep, self.name in EXACT_OPS))
            else:
                rounded.append(o.detach() if isinstance(o, torch.Tensor) else o)
        return rounded, spec, floats, flat


class _RoundedOp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, call: _OpCall, *tensors):
        with torch.enable_grad():
            local = [t.detach().requires_grad_(t.requires_grad) if t.is_floating_point() else t.detach()
                     for t in tensors]
            out = call.compute(local)
        rounded, spec, floats, flat_out = call.round_outputs(out)
        ctx.call, ctx.local_in = call, local
        ctx.local_out = [flat_out[j] for j in floats]
        ctx.out_shapes = [flat_out[j].shape for j in floats]
        tensors_out = [r for r in rounded if isinstance(r, torch.Tensor)]
        nondiff = [r for r in tensors_out if not r.is_floating_point()]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        ctx.tensor_out_positions = [j for j, r in enumerate(rounded) if isinstance(r, torch.Tensor)]
        ctx.float_index = {j: floats.index(j) for j in floats}
        call.out_template, call.out_spec = rounded, spec
        call.tensor_out_positions = ctx.tensor_out_positions
        return tuple(tensors_out)

    @staticmethod
    def backward(ctx, *grads):
        call = ctx.call
        outs, gouts = [], []
        for pos, g in zip(ctx.tensor_out_positions, grads):
            k = ctx.float_index.get(pos)
            if k is not None and ctx.local_out[k].requires_grad:
                outs.append(ctx.local_out[k])
                gouts.append(g)
        need = [i for i, t in enumerate(ctx.local_in) if t.requires_grad]
        result: list = [None] * len(ctx.local_in)
        if outs and need:
            gs = _local_grads(outs, [ctx.local_in[i] for i in need], gouts)
            single_shape = ctx.out_shapes[0] if len(ctx.out_shapes) == 1 else None
            for i, g in zip(need, gs):
                if g is None:
                    continue
                if call.batch[i]:
                    key = f"{call.name}:grad{i}"
                    exact = call.name in EXACT_OPS
                    if exact and ctx.local_in[i].shape != single_shape:
                        exact, key = False, key + ":bcast"  # the gradient sums over broadcast axes
                    g = call.mode.engine.site(key, g, True, exact)
                result[i] = g
        ctx.local_out = ctx.local_in = None  # free the local graph
        return (None, *result)


class RoundingMode(TorchFunctionMode):
    """Active during forward passes of a rounding-log run (see module doc)."""

    def __init__(self, engine: RoundingEngine, backend: str = "torch", module_paths: dict[int, str] | None = None):
        super().__init__()
        if backend not in ("torch", "numpy"):
            raise ValueError(f"unknown matmul backend {backend!r}")
        self.engine, self.backend = engine, backend
        self.module_paths = module_paths or {}  # id(module) -> its path in the model, to name it in errors

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = op_name(func)
        if name in META:
            _count_uses(args)
            out = func(*args, **kwargs)
            if name == "__get__" and isinstance(out, torch.Tensor) and any(is_batch(x) for x in args):
                mark_batch(out)  # properties such as .T and .mT are views
            return out
        if name in PASSTHROUGH:
            leaves = tree_flatten((args, kwargs))[0]
            _count_uses(leaves)
            out = func(*args, **kwargs)
            if any(is_batch(x) for x in leaves):
                _mark_outputs(out)
            return out
        if name.startswith("inplace_") or (name.endswith("_") and not name.startswith("_")) or name == "__setitem__" \
                or kwargs.get("inplace") is True:
            raise RoundLogError(self._refusal(name, in_place=True))
        if name in RANDOM or (name == "scaled_dot_product_attention"
                                 and (args[4] if len(args) > 4 else kwargs.get("dropout_p", 0.0))):
            raise RoundLogError(self._refusal(name, in_place=False))
        if name == "dropout":
            return self._dropout(args, kwargs)
        if name == "batch_norm" and (args[5] if len(args) > 5 else kwargs.get("training", False)) \
                and (args[1] if len(args) > 1 else kwargs.get("running_mean")) is not None:
            raise RoundLogError("F.batch_norm updates running statistics in place; use models.GhostBatchNorm2d")
        if name == "gelu" and args and is_batch(args[0]) and args[0].dtype == F64:
            return self._run(_OpCall(self, own_ops.gelu, own_ops.OWN_GELU, args, kwargs))  # see own_ops
        return self._run(_OpCall(self, func, name, args, kwargs))

    def _dropout(self, args, kwargs):
        """F.dropout / torch.dropout: a mask from the job's counter-based RNG (see :mod:`.dropout`)."""
        x = args[0] if args else kwargs["input"]
        p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
        training = args[2] if len(args) > 2 else kwargs.get("training", kwargs.get("train", True))
        if len(args) > 3 and args[3]:
            raise RoundLogError(self._refusal("dropout", in_place=True))
        if not training or p == 0.0:
            return x
        factor = self.engine.dropout_factor(x, float(p), is_batch(x))
        return self._run(_OpCall(self, torch.mul, "dropout", (x, factor), {}))

    def _run(self, call: _OpCall):
        tensors = call.tensors()
        _count_uses(tensors)
        needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        if needs_grad:
            outs = _RoundedOp.apply(call, *tensors)
            flat = list(call.out_template)
            call.out_template = None  # it holds the outputs, whose backward node holds call: a cycle the GC cannot see
            for pos, o in zip(call.tensor_out_positions, outs):
                flat[pos] = o
            result = tree_unflatten(flat, call.out_spec)
            if any(call.batch):
                for o in outs:
                    if o.requires_grad and o.dtype == F64:
                        _round_fan_in(self.engine, o)
        else:
            with torch.no_grad():
                out = call.compute([t.detach() for t in tensors])
            rounded, spec, _, _ = call.round_outputs(out)
            result = tree_unflatten(rounded, spec)
        if any(call.batch):
            _mark_outputs(result)
        return result

    def _refusal(self, name: str, in_place: bool) -> str:
        where = self._calling_module()
        if in_place:
            return (f"in-place op {name}{where}: the rounding-log mode cannot log an op that overwrites its input; "
                    "write it out of place (x = x + y instead of x += y, x = x.relu() instead of x.relu_(), "
                    "nn.ReLU() / F.relu(x) instead of inplace=True)")
        return (f"{name}{where} draws from torch's global random generator, which an auditor cannot reproduce; "
                "use F.dropout / nn.Dropout (masks from the job's seed and step) or draw the randomness outside "
                "the model")

    def _calling_module(self) -> str:
        """' in <module path> (<class>)': the innermost module of the model whose code is running."""
        frame = inspect.currentframe()
        while frame is not None:
            owner = frame.f_locals.get("self")
            path = self.module_paths.get(id(owner)) if isinstance(owner, torch.nn.Module) else None
            if path is not None:
                return f" in {path or '<model>'} ({type(owner).__name__})"
            frame = frame.f_back
        return ""
