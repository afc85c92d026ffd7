"""Initial weights from a safetensors file, and fine-tuned weights back into one.

A job's ``[model] init = "weights.safetensors"`` starts training from the tensors of
that file instead of the seed's initialisation. The file holds the model's
parameters either by our names (the `named_params` / torch ``state_dict`` names,
what `save_weights` writes) or, for the ``gpt`` model, in GPT-2's layout (the
Hugging Face ``GPT2Model``/``GPT2LMHeadModel`` names, with or without the
``transformer.`` prefix):

    wte, wpe, h.{i}.ln_1, h.{i}.attn.c_attn (q, k, v fused along the output axis),
    h.{i}.attn.c_proj, h.{i}.ln_2, h.{i}.mlp.c_fc, h.{i}.mlp.c_proj, ln_f, [lm_head]

GPT-2's linear layers are ``Conv1D``: their weight is (in, out), the transpose of
ours. The attention mask buffers (``attn.bias``, ``attn.masked_bias``) are not
parameters and are skipped; ``lm_head.weight`` is the tied token embedding and must
equal ``wte.weight`` when the model ties its head.

Every tensor is checked by name: none missing or extra, each of the model's shape,
floating point (float16 and float64 are rounded once to float32), and finite.
The file's hash is in the job's identity (`jobspec.ModelSpec.init_hash`) and the
loaded weights are in its initial state hash, so every party starts from the same bits.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .data import DataError
from .optim import PARAM_PREFIX

GPT2_BUFFERS = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")
GPT2_BLOCK = re.compile(r"^h\.(\d+)\.(.+)$")
FLOAT_DTYPES = (np.float16, np.float32, np.float64)


class WeightsError(DataError):
    """A weights file that cannot be used for the job's model; the message names the tensor."""


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as float32, after checking dtypes and values."""
    from safetensors import safe_open  # noqa: PLC0415 - only jobs with initial weights read one

    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"model.init: no such file {path}")
    try:
        with safe_open(str(path), framework="np") as f:
            names = list(f.keys())
            raw = {name: f.get_tensor(name) for name in names}
    except Exception as exc:  # the library raises its own types (bf16 included: NumPy has no bfloat16)
        raise WeightsError(f"model.init: {path.name} is not a readable safetensors file of float tensors "
                           f"({str(exc)[:200]})") from None
    out = {}
    for name in sorted(raw):
        value = raw[name]
        if value.dtype.type not in FLOAT_DTYPES:
            raise WeightsError(f"model.init: tensor {name!r} has dtype {value.dtype}, not floating point")
        value = np.ascontiguousarray(value, dtype=np.float32)
        if not np.isfinite(value).all():
            bad = int(np.flatnonzero(~np.isfinite(value.reshape(-1)))[0])
            raise WeightsError(f"model.init: tensor {name!r} holds a NaN or infinite value (element {bad})")
        out[name] = value
    return out


def is_gpt2_layout(names: Any) -> bool:
    return any(GPT2_BLOCK.match(n.removeprefix("transformer.")) for n in names)


def from_gpt2(tensors: Mapping[str, np.ndarray], *, tie_head: bool) -> dict[str, np.ndarray]:
    """GPT-2 layout -> our names (Conv1D weights transposed, c_attn split into q, k, v)."""
    out: dict[str, np.ndarray] = {}
    head = None
    for full, value in tensors.items():
        name = full.removeprefix("transformer.")
        if GPT2_BUFFERS.match(name):
            continue
        if name == "lm_head.weight":
            head = value
            continue
        block = GPT2_BLOCK.match(name)
        if block is None:
            out[name] = value  # wte, wpe, ln_f (same names); anything else is reported as extra
            continue
        i, rest = block.groups()
        p = f"blocks.{i}."
        if rest in ("attn.c_attn.weight", "attn.c_attn.bias"):
            kind = rest.rsplit(".", 1)[1]
            if value.shape[-1] % 3:
                raise WeightsError(f"model.init: tensor {full!r} of shape {value.shape} is not three fused projections")
            for proj, part in zip(("q_proj", "k_proj", "v_proj"), np.split(value, 3, axis=-1)):
                out[f"{p}attn.{proj}.{kind}"] = np.ascontiguousarray(part.T if kind == "weight" else part)
            continue
        ours = {"ln_1": "ln1", "ln_2": "ln2", "attn.c_proj": "attn.out_proj", "mlp.c_fc": "mlp.0",
                "mlp.c_proj": "mlp.2"}
        module, kind = rest.rsplit(".", 1)
        if module not in ours:
            out[name] = value
            continue
        conv1d = module != "ln_1" and module != "ln_2" and kind == "weight"
        out[f"{p}{ours[module]}.{kind}"] = np.ascontiguousarray(value.T) if conv1d else value
    if head is not None:
        if not tie_head:
            out["head.weight"] = head
        elif "wte.weight" in out and not np.array_equal(head, out["wte.weight"]):
            raise WeightsError("model.init: tensor 'lm_head.weight' differs from 'wte.weight', "
                               "but the model ties its head to the token embedding (model.tie_head)")
    return out


def to_gpt2(params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Our GPT names -> GPT-2 layout (the inverse of `from_gpt2`, for a tied-head model)."""
    out: dict[str, np.ndarray] = {}
    ours = {"ln1": "ln_1", "ln2": "ln_2", "attn.out_proj": "attn.c_proj", "mlp.0": "mlp.c_fc", "mlp.2": "mlp.c_proj"}
    blocks = sorted({int(m.group(1)) for n in params if (m := re.match(r"^blocks\.(\d+)\.", n))})
    for name, value in params.items():
        m = re.match(r"^blocks\.(\d+)\.(.+)\.(weight|bias)$", name)
        if m is None:
            out[name] = value
            continue
        i, module, kind = m.groups()
        if module.startswith("attn.") and module != "attn.out_proj":
            continue  # fused below
        transposed = module not in ("ln1", "ln2") and kind == "weight"
        out[f"h.{i}.{ours[module]}.{kind}"] = np.ascontiguousarray(value.T) if transposed else value
    for i in blocks:
        p = f"blocks.{i}.attn."
        out[f"h.{i}.attn.c_attn.weight"] = np.ascontiguousarray(
            np.concatenate([params[f"{p}{q}.weight"].T for q in ("q_proj", "k_proj", "v_proj")], axis=1))
        out[f"h.{i}.attn.c_attn.bias"] = np.concatenate([params[f"{p}{q}.bias"] for q in ("q_proj", "k_proj", "v_proj")])
    return out


def match_params(tensors: Mapping[str, np.ndarray], expected: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """`tensors` in the order of `expected`, after checking names and shapes."""
    missing = [n for n in expected if n not in tensors]
    if missing:
        raise WeightsError(f"model.init: the file lacks tensor {missing[0]!r}"
                           + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise WeightsError(f"model.init: tensor {extra[0]!r} is not a parameter of the model"
                           + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""))
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != tuple(shape):
            raise WeightsError(f"model.init: tensor {name!r} has shape {tuple(tensors[name].shape)}, "
                               f"the model's is {tuple(shape)}")
    return {name: np.ascontiguousarray(tensors[name], dtype=np.float32) for name in expected}


def load_weights(path: str | Path, net: Any) -> dict[str, np.ndarray]:
    """The parameters of `net` (a `models.Layer`) from a safetensors file, by our names or GPT-2's."""
    tensors = read_safetensors(path)
    expected = {name: spec.shape for name, spec in net.named_params()}
    if is_gpt2_layout(tensors):  # our names never start with "h.{i}."
        tensors = from_gpt2(tensors, tie_head=bool(getattr(net, "tie_head", False)))
    return match_params(tensors, expected)


def initial_weights(spec: Any, net: Any) -> dict[str, np.ndarray]:
    """The initial parameters a job's ``model.init`` names, its hash checked against the spec's."""
    from .jobspec import file_hash  # noqa: PLC0415 - jobspec stays free of numpy-heavy imports

    path = Path(spec.model.init).expanduser()
    path = path if path.is_absolute() else Path(spec.base_dir) / path
    if not path.is_file():
        raise WeightsError(f"model.init: no such file {path}")
    if file_hash(path) != spec.model.init_hash:
        raise WeightsError(f"model.init: {path.name} changed since the job was read (its hash differs)")
    return load_weights(path, net)


def save_weights(path: str | Path, params: Mapping[str, Any], *, layout: str = "ours") -> None:
    """Write parameters (or a training state: its "params/..." tensors) to a safetensors file.

    layout "gpt2" writes GPT-2's names (for a GPT with a tied head), "ours" our names.
    """
    from safetensors.numpy import save_file  # noqa: PLC0415

    if any(k.startswith(PARAM_PREFIX) for k in params):
        params = {k[len(PARAM_PREFIX):]: v for k, v in params.items() if k.startswith(PARAM_PREFIX)}
    tensors = {k: np.ascontiguousarray(np.asarray(v), dtype=np.float32) for k, v in params.items()}
    if layout == "gpt2":
        if "head.weight" in tensors:
            raise WeightsError("GPT-2 layout needs a model with a tied head (model.tie_head = true)")
        tensors = to_gpt2(tensors)
    elif layout != "ours":
        raise ValueError(f"layout must be 'ours' or 'gpt2', got {layout!r}")
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, path)


def export_checkpoint(checkpoint: str | Path, out: str | Path, *, layout: str = "ours") -> None:
    """A `gavel train` checkpoint's parameters as a plain safetensors weights file."""
    from .checkpoint import load_checkpoint  # noqa: PLC0415

    state, _, _ = load_checkpoint(checkpoint)
    save_weights(out, state, layout=layout)
