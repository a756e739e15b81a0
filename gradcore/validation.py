"""Checks at the boundary: a bad argument gets a clear error before any work, never garbage.

Every public entry point of gradcore (``attack``, ``Observation``, ``shared_gradient``,
``per_sample_gradients``, ``local_update``, ``defend``, ``models.build``, ``data.load``,
the metrics, the exclusivity and minimal-structure entry points) checks what it is given
with the functions here, once, before it computes anything. An error names the argument,
what was expected and what was given, and is one of the library's own classes:

* :class:`GradcoreValueError` (a ``ValueError``): the value is of the right kind but
  wrong (out of range, wrong shape, non-finite, ...);
* :class:`GradcoreTypeError` (a ``TypeError``, and a ``ValueError`` for older callers): the
  value is of the wrong kind (a string for a number, a float for a count, a list for a
  tensor, an unknown option).

Both derive from :class:`GradcoreError`, so ``except GradcoreError`` catches everything
gradcore refuses on purpose, while callers that catch ``ValueError`` (or ``TypeError``)
keep working.

The checks only refuse. They never convert, copy or alter a valid argument, so a valid
call computes, bit for bit, what it computed without them.
"""

from __future__ import annotations

import inspect
import math
import numbers
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
from torch import nn

from .errors import AttackRefused, GradcoreError, GradcoreTypeError, GradcoreValueError  # noqa: F401 (re-exported)

# ----------------------------------------------------------------------------------
# Describing what was given
# ----------------------------------------------------------------------------------


def describe(value: Any) -> str:
    """A short description of ``value`` for an error message: its value and kind, or a tensor's
    dtype and shape."""
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).replace('torch.', '')} tensor of shape {tuple(value.shape)}"
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} (a {type(value).__name__})"


def _is_integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _real_value(value: Any) -> float | None:
    """``value`` as a float if it is a real number (a 0-dim real tensor counts), else ``None``;
    bools are not numbers."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if (
        isinstance(value, torch.Tensor)
        and value.dim() == 0
        and not value.is_complex()
        and value.dtype != torch.bool
    ):
        return float(value.item())
    return None


# ----------------------------------------------------------------------------------
# Scalars
# ----------------------------------------------------------------------------------


def _integer_range(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"between {low} and {high}"
    if low is not None:
        return f"at least {low}"
    if high is not None:
        return f"at most {high}"
    return "any whole number"


def integer(
    name: str, value: Any, low: int | None = None, high: int | None = None, allow_none: bool = False
) -> None:
    """A whole number (``int`` or a numpy integer, not a bool or a float) within ``[low, high]``.

    Raises
    ------
    GradcoreTypeError
        Not a whole number (``2.0`` included: a count is written ``2``).
    GradcoreValueError
        Outside the range.
    """
    if value is None and allow_none:
        return
    bounds = "" if low is None and high is None else f" {_integer_range(low, high)}"
    expected = f"a whole number{bounds}" + (" or None" if allow_none else "")
    if not _is_integer(value):
        hint = ""
        real = _real_value(value)
        if real is not None and math.isfinite(real) and real == int(real):
            hint = f" (write {int(real)}, not {value!r})"
        raise GradcoreTypeError(f"{name} must be {expected}; got {describe(value)}{hint}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise GradcoreValueError(f"{name} must be {_integer_range(low, high)}; got {value}")


def positive_int(name: str, value: Any, allow_none: bool = False) -> None:
    """A count: a whole number of at least 1 (``None`` too when ``allow_none``)."""
    integer(name, value, low=1, allow_none=allow_none)


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"{'<' if high_open else '<='} {high:g}"
    return "(any finite value)"


def number(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    allow_none: bool = False,
) -> None:
    """A finite real number within the given interval (``int``, ``float``, numpy scalars, 0-dim real
    tensors).

    Raises
    ------
    GradcoreTypeError
        Not a real number (a string such as ``"0.1"``, a bool, a list, ...).
    GradcoreValueError
        NaN, infinite, or outside the interval.
    """
    if value is None and allow_none:
        return
    expected = f"a finite number {_interval(low, high, low_open, high_open)}" + (
        " or None" if allow_none else ""
    )
    real = _real_value(value)
    if real is None:
        hint = (
            f" (pass the number itself, e.g. {value.strip()}, not a string)"
            if isinstance(value, str)
            else ""
        )
        raise GradcoreTypeError(f"{name} must be {expected}; got {describe(value)}{hint}")
    if not math.isfinite(real):
        raise GradcoreValueError(f"{name} must be {expected}; got {real}")
    if (low is not None and (real <= low if low_open else real < low)) or (
        high is not None and (real >= high if high_open else real > high)
    ):
        raise GradcoreValueError(
            f"{name} must be {_interval(low, high, low_open, high_open)}; got {value}"
        )


def boolean(name: str, value: Any) -> None:
    """``True`` or ``False`` (a numpy bool too)."""
    if not isinstance(value, (bool, np.bool_)):
        raise GradcoreTypeError(f"{name} must be True or False; got {describe(value)}")


def one_of(name: str, value: Any, choices: Sequence) -> None:
    """One of ``choices`` (strings or ``None``), compared by equality."""
    if not (value is None or isinstance(value, str)) or value not in choices:
        listed = ", ".join(repr(choice) for choice in choices)
        error = (
            GradcoreTypeError
            if not (value is None or isinstance(value, str))
            else GradcoreValueError
        )
        raise error(f"{name} must be one of {listed}; got {describe(value)}")


def integers(name: str, value: Any, low: int | None = 1, allow_empty: bool = False) -> None:
    """A sequence (tuple, list, ``torch.Size``, range) of whole numbers, each at least ``low``."""
    if isinstance(value, (str, bytes, dict, set)) or not isinstance(
        value, (Sequence, torch.Size, np.ndarray)
    ):
        raise GradcoreTypeError(
            f"{name} must be a sequence of whole numbers {_integer_range(low, None)}, e.g. (1, 8, "
            f"8); got {describe(value)}"
        )
    if len(value) == 0 and not allow_empty:
        raise GradcoreValueError(
            f"{name} must list at least one whole number; got an empty {type(value).__name__}"
        )
    for index, entry in enumerate(value):
        integer(f"{name}[{index}]", entry, low=low)


def input_shape(name: str, value: Any) -> None:
    """The shape of one input: a non-empty sequence of positive whole numbers, e.g. ``(3, 32,
    32)``."""
    integers(name, value, low=1)


def real_array(name: str, value: Any) -> np.ndarray:
    """A finite real numpy view of ``value`` (numbers, lists, arrays, CPU tensors); refused with a
    clear error if none exists."""
    try:
        array = np.asarray(value.detach().cpu() if isinstance(value, torch.Tensor) else value)
    except (TypeError, ValueError) as error:
        raise GradcoreTypeError(
            f"{name} must be an array of real numbers; got {describe(value)} ({error})"
        ) from None
    if (
        array.dtype == object
        or not (np.issubdtype(array.dtype, np.number) or array.dtype == bool)
        or np.issubdtype(array.dtype, np.complexfloating)
    ):
        raise GradcoreTypeError(f"{name} must be an array of real numbers; got {describe(value)}")
    bad = (
        int(array.size - np.isfinite(array).sum()) if np.issubdtype(array.dtype, np.floating) else 0
    )
    if bad:
        raise GradcoreValueError(
            f"{name} has {bad} NaN or infinite values; every entry must be finite"
        )
    return array


# ----------------------------------------------------------------------------------
# Tensors
# ----------------------------------------------------------------------------------


def tensor(name: str, value: Any, floating: bool = False) -> None:
    """A ``torch.Tensor`` (of a floating dtype when ``floating``)."""
    if not isinstance(value, torch.Tensor):
        raise GradcoreTypeError(
            f"{name} must be a torch.Tensor; got {describe(value)}"
            + (
                " (convert with torch.as_tensor)"
                if isinstance(value, (list, tuple, np.ndarray))
                else ""
            )
        )
    if floating and not value.is_floating_point():
        hint = (
            " (images in 0-255: convert with images.float() / 255)"
            if value.dtype == torch.uint8
            else ""
        )
        raise GradcoreTypeError(
            f"{name} must be a floating-point tensor; got {describe(value)}{hint}"
        )


def device(name: str, value: Any) -> torch.device:
    """A torch device this machine has (``"cpu"``, ``"cuda"``, ``"cuda:1"``, a ``torch.device``),
    returned as one."""
    try:
        resolved = torch.device(value)
    except (RuntimeError, TypeError) as error:
        raise GradcoreValueError(
            f"{name} must name a torch device such as 'cpu' or 'cuda'; got {describe(value)} "
            f"({str(error).splitlines()[0][:80]})"
        ) from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise GradcoreValueError(
            f"{name} is {value!r}, but this machine has no CUDA device; use 'cpu'"
        )
    return resolved


def finite(name: str, value: torch.Tensor) -> None:
    """No NaN or infinite entry; the message counts them."""
    if (value.is_floating_point() or value.is_complex()) and not bool(torch.isfinite(value).all()):
        bad = int((~torch.isfinite(value)).sum().item())
        if bad:
            raise GradcoreValueError(
                f"{name} ({describe(value)}) has {bad} NaN or infinite values; every entry must be "
                "finite"
            )


def trainable_parameters(name: str, model: Any) -> list:
    """``model`` is an ``nn.Module`` with at least one trainable parameter; returns those
    parameters."""
    if not isinstance(model, nn.Module):
        raise GradcoreTypeError(f"{name} must be a torch.nn.Module; got {describe(model)}")
    parameters = [p for p in model.parameters() if p.requires_grad]
    if not parameters:
        raise GradcoreValueError(
            f"{name} has no trainable parameter: there is nothing to take a gradient of"
        )
    return parameters


def model_outputs(model: nn.Module, shape: Sequence[int], name: str = "inputs") -> tuple:
    """Shape of the model's output for one input of ``shape``, found by one forward pass of zeros.

    The pass runs without gradient and in evaluation mode (batch norm reads its running
    statistics and updates nothing); every module's mode is restored afterwards, so the
    model is left exactly as it was.

    Raises
    ------
    GradcoreValueError
        The model cannot take an input of that shape; the message quotes the model's own complaint.
    """
    parameter = trainable_parameters("model", model)[0]
    sample = torch.zeros((1, *shape), dtype=parameter.dtype, device=parameter.device)
    modes = [(module, module.training) for module in model.modules()]
    try:
        for module, _ in modes:
            module.training = False
        with torch.no_grad():
            output = model(sample)
    except (RuntimeError, ValueError, IndexError, TypeError) as error:
        complaint = (
            str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        )
        raise GradcoreValueError(
            f"{name} of shape {tuple(shape)} (one sample) do not fit the model: a forward pass "
            f"fails with {complaint!r}; check the input shape against the model's first layers"
        ) from None
    finally:
        for module, mode in modes:
            module.training = mode
    if not isinstance(output, torch.Tensor):
        return ()
    return tuple(output.shape[1:])


def inputs_for(model: nn.Module, inputs: Any, name: str = "inputs") -> tuple:
    """A batch the model can take: a finite tensor ``(B, *shape)``, ``B >= 1``, in the model's dtype
    and on its device.

    Returns
    -------
    tuple
        The shape of the model's output for one sample (``(K,)`` for ``K`` classes).
    """
    parameter = trainable_parameters("model", model)[0]
    tensor(name, inputs)
    if inputs.dtype != parameter.dtype:
        raise GradcoreValueError(
            f"{name} are {str(inputs.dtype).replace('torch.', '')} but the model's parameters are "
            f"{str(parameter.dtype).replace('torch.', '')}: convert one to the other, e.g. "
            f"{name}.to({parameter.dtype}) or model.to({inputs.dtype})"
        )
    if inputs.device != parameter.device:
        raise GradcoreValueError(
            f"{name} are on {inputs.device} but the model is on {parameter.device}: move one, e.g. "
            f"{name}.to('{parameter.device}')"
        )
    if inputs.dim() < 2:
        raise GradcoreValueError(
            f"{name} must be a batch shaped (B, *input shape); got shape {tuple(inputs.shape)} "
            f"(for one sample add the batch dimension: {name}.unsqueeze(0))"
        )
    if len(inputs) == 0:
        raise GradcoreValueError(
            f"{name} is an empty batch (shape {tuple(inputs.shape)}): a gradient needs at least "
            "one sample"
        )
    finite(name, inputs)
    return model_outputs(model, tuple(inputs.shape[1:]), name)


def targets_for(
    name: str,
    targets: Any,
    batch_size: int,
    outputs: tuple,
    loss: Any,
    device: torch.device | None = None,
) -> None:
    """Labels or regression targets that fit the loss, the batch and the model's outputs.

    * cross-entropy: integer class indices ``(B,)`` in ``0 .. K-1``, or per-class
      probabilities ``(B, K)`` (a float ``(B,)`` tensor is refused: cross-entropy would
      broadcast it and compute another loss);
    * half squared error: ``B`` finite targets, ``B * outputs`` entries in all;
    * a callable loss: a tensor with one row per sample.
    """
    tensor(name, targets)
    if device is not None and targets.device != device:
        raise GradcoreValueError(
            f"{name} are on {targets.device} but the model is on {device}: move them with "
            f"{name}.to('{device}')"
        )
    if targets.dim() == 0 or len(targets) != batch_size:
        given = "a 0-dim tensor" if targets.dim() == 0 else f"{len(targets)} {name}"
        raise GradcoreValueError(
            f"{given} given for a batch of {batch_size}: expected one per sample (shape "
            f"{tuple(targets.shape)})"
        )
    if targets.is_complex() or targets.dtype == torch.bool:
        raise GradcoreTypeError(
            f"{name} must be real numbers or integer classes; got {describe(targets)}"
        )
    finite(name, targets)
    classes = outputs[0] if len(outputs) == 1 else None
    if loss == "cross_entropy":
        if targets.is_floating_point():
            if targets.shape != (batch_size, classes) or classes is None:
                raise GradcoreTypeError(
                    f"{name} are {describe(targets)}: cross-entropy takes integer class indices "
                    f"shaped ({batch_size},), e.g. torch.tensor([3]) (dtype torch.int64), or "
                    f"per-class probabilities shaped ({batch_size}, "
                    f"{classes if classes is not None else 'classes'}); convert class labels with "
                    f"{name}.long()"
                )
            return
        if targets.shape != (batch_size,):
            raise GradcoreValueError(
                f"{name} must be class indices shaped ({batch_size},); got shape "
                f"{tuple(targets.shape)}"
            )
        low, high = int(targets.min()), int(targets.max())
        if low < 0 or (classes is not None and high >= classes):
            limit = (
                f"0 .. {classes - 1} (the model has {classes} outputs)"
                if classes is not None
                else "non-negative"
            )
            raise GradcoreValueError(
                f"{name} must be class indices in {limit}; got values from {low} to {high}"
            )
    elif loss == "half_squared_error":
        per_sample = math.prod(outputs) if outputs else None
        if per_sample is not None and targets.numel() != batch_size * per_sample:
            raise GradcoreValueError(
                f"{name} must hold {per_sample} target value(s) per sample "
                f"({batch_size * per_sample} in all) to match the model's outputs; got shape "
                f"{tuple(targets.shape)}"
            )


def gradient(value: Any, model: nn.Module | None = None, name: str = "gradient") -> tuple:
    """A gradient: a non-empty sequence of finite floating tensors of one dtype and device.

    With ``model``: one tensor per trainable parameter, each of its parameter's shape,
    dtype and device; errors name the parameter (``"2.weight"``) as well as its index.

    Returns
    -------
    tuple
        The same tensors, as a tuple.
    """
    if (
        isinstance(value, torch.Tensor)
        or not isinstance(value, Iterable)
        or isinstance(value, (str, bytes, dict))
    ):
        raise GradcoreTypeError(
            f"{name} must be a sequence of tensors, one per trainable parameter; got "
            f"{describe(value)}"
        )
    entries = tuple(value)
    named = [n for n, p in model.named_parameters() if p.requires_grad] if model is not None else []
    parameters = trainable_parameters("model", model) if model is not None else []
    if len(entries) == 0:
        expected = f" ({len(parameters)} for this model)" if model is not None else ""
        raise GradcoreValueError(
            f"{name} is empty: expected one tensor per trainable parameter{expected}"
        )
    if model is not None and len(entries) != len(parameters):
        raise GradcoreValueError(
            f"{name} has {len(entries)} tensors but the model has {len(parameters)} trainable "
            "parameters"
        )

    def label(index: int) -> str:
        return f"{name} entry {index}" + (f" (parameter {named[index]!r})" if named else "")

    for index, entry in enumerate(
        entries
    ):  # kinds, shapes, dtypes and devices first: cheap, no pass over the values
        if not isinstance(entry, torch.Tensor):
            raise GradcoreTypeError(f"{label(index)} must be a tensor; got {describe(entry)}")
        if not entry.is_floating_point():
            raise GradcoreTypeError(
                f"{label(index)} must be a floating-point tensor; got {describe(entry)}"
            )
        if model is not None:
            parameter = parameters[index]
            if entry.shape != parameter.shape:
                raise GradcoreValueError(
                    f"{label(index)} has shape {tuple(entry.shape)}, its parameter has "
                    f"{tuple(parameter.shape)}"
                )
            if entry.dtype != parameter.dtype:
                raise GradcoreValueError(
                    f"{label(index)} is {str(entry.dtype).replace('torch.', '')}, its parameter "
                    f"{str(parameter.dtype).replace('torch.', '')}: share the gradient in the "
                    "model's dtype"
                )
            if entry.device != parameter.device:
                raise GradcoreValueError(
                    f"{label(index)} is on {entry.device}, its parameter on {parameter.device}"
                )
        elif entry.dtype != entries[0].dtype or entry.device != entries[0].device:
            raise GradcoreValueError(
                f"{label(index)} is {describe(entry)} on {entry.device}, but entry 0 is "
                f"{describe(entries[0])} on {entries[0].device}: a gradient has one dtype and one "
                "device"
            )
    if not all_finite(
        entries
    ):  # one pass and one synchronisation for the whole gradient; the count only on failure
        for index, entry in enumerate(entries):
            bad = int((~torch.isfinite(entry)).sum().item())
            if bad:
                raise GradcoreValueError(
                    f"{label(index)} (shape {tuple(entry.shape)}) has {bad} NaN or infinite "
                    "values; a gradient must be finite"
                )
    return entries


def all_finite(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether every entry of every tensor is finite.

    Fast path: NaN and infinities propagate through sums, so a finite total of the
    tensors' sums proves them all finite, with one synchronisation. A total can also
    overflow with every entry finite; only then are the entries looked at one by one.
    """
    sums = [t.sum() for t in tensors if t.numel()]
    if not sums or bool(torch.isfinite(sum(sums))):
        return True
    return all(bool(torch.isfinite(t).all()) for t in tensors)


# ----------------------------------------------------------------------------------
# Options of registered functions (attacks, defenses, models, datasets)
# ----------------------------------------------------------------------------------


def _count(name, value):
    positive_int(name, value)


def _count_or_none(name, value):
    positive_int(name, value, allow_none=True)


def _positive(name, value):
    number(name, value, low=0, low_open=True)


def _non_negative(name, value):
    number(name, value, low=0)


def _fraction(name, value):  # (0, 1]
    number(name, value, low=0, high=1, low_open=True)


def local_training(name: str, value: Any) -> None:
    """A client's local training: None (one gradient), or a dict with ``lr`` and optionally
    ``epochs``, ``batch_size``."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise GradcoreTypeError(
            f"{name} must be a dict with 'lr' and optionally 'epochs' and 'batch_size'; got "
            f"{describe(value)}"
        )
    unknown = sorted(set(value) - {"lr", "epochs", "batch_size"})
    if unknown or "lr" not in value:
        raise GradcoreValueError(
            f"{name} must have the key 'lr' and optionally 'epochs' and 'batch_size'; got keys "
            f"{sorted(value)}"
        )
    _positive(f"'lr' of {name}", value["lr"])
    _count(f"'epochs' of {name}", value.get("epochs", 1))
    _count_or_none(f"'batch_size' of {name}", value.get("batch_size"))


def _schedule(name, value):
    """A step-size schedule: the paper's step decay (``True``), none (``False``), or one by name."""
    if not isinstance(value, bool) and value not in ("step", "cosine", "linear"):
        error = GradcoreValueError if isinstance(value, str) else GradcoreTypeError
        raise error(
            f"{name} must be True, False or one of 'step', 'cosine', 'linear'; got "
            f"{describe(value)}"
        )


def _callable_or_none(name, value):
    if value is not None and not callable(value):
        raise GradcoreTypeError(f"{name} must be a callable or None; got {describe(value)}")


#: Checks of the options that registered functions share, by option name. An option not
#: listed is checked by the function itself (registry names such as ``init`` or
#: ``optimiser`` fail with the list of known names).
OPTION_RULES: dict[str, Callable[[str, Any], None]] = {
    # counts
    "iterations": _count,
    "max_iter": _count,
    "record_every": _count,
    "restarts": _count,
    "samples": _count,
    "trials": _count,
    "epochs": _count,
    "per_photo": _count,
    "size": _count,
    "width": _count,
    "limit": _count_or_none,
    "limit_per_class": _count_or_none,
    "batch_size": _count_or_none,
    "seed": lambda name, value: integer(name, value),
    "depth": lambda name, value: integer(name, value),
    # rates and weights
    "lr": _positive,
    "bound": _positive,
    "init_scale": _positive,
    "sigma": _non_negative,
    "tv_weight": _non_negative,
    "weight": _non_negative,
    "keep": _fraction,
    "crop_fraction": _fraction,
    "prune": lambda name, value: number(name, value, low=0, high=1, high_open=True),
    "tolerance": lambda name, value: number(name, value, low=0, low_open=True, allow_none=True),
    # flags, names, structures
    "signed": boolean,
    "layerwise": boolean,
    "progress": boolean,
    "bias": boolean,
    "widths": lambda name, value: integers(name, value, low=1, allow_empty=True),
    "snapshots": lambda name, value: integers(name, value, low=0, allow_empty=True),
    "line_search": lambda name, value: one_of(name, value, (None, "strong_wolfe")),
    "projection": lambda name, value: one_of(name, value, ("exact", "public")),
    "padding_mode": lambda name, value: one_of(
        name, value, ("zeros", "reflect", "replicate", "circular")
    ),
    "split": lambda name, value: one_of(name, value, ("train", "test")),
    "local": local_training,
    "transform": _callable_or_none,
    # the GAN-prior attacks' budgets and steps (GGL, GIAS, GIFD)
    "latent_iterations": _count,
    "parameter_iterations": _count,
    "layer_iterations": _count,
    "generations": _count,
    "population": _count,
    "candidates": _count,
    "parameter_lr": _positive,
    "feature_lr": _positive,
    "ball": _positive,
    "kl_weight": _non_negative,
    "noise_sigma": _non_negative,
    "decay": _schedule,
}


def options(owner: str, function: Callable, given: dict, skip: Sequence[str] = ()) -> None:
    """Check the keyword options passed to a registered function before calling it.

    Unknown options and missing required ones are :class:`GradcoreTypeError`\\ s listing
    what the function accepts; each option named in :data:`OPTION_RULES` is checked for
    type and range, the message naming the option and its owner.

    Parameters
    ----------
    owner : str
        What the options belong to, for messages (``"defense 'noise'"``).
    function : callable
        The registered function; its signature says which options exist.
    given : dict
        The options passed.
    skip : sequence of str
        Parameters the caller fills itself (the gradient, the observation, ...).
    """
    parameters = inspect.signature(function).parameters
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    known = [name for name, p in parameters.items() if p.kind in kinds and name not in skip]
    takes_any = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    unknown = [key for key in given if key not in known]
    if unknown and not takes_any:
        listed = ", ".join(known) or "none"
        raise GradcoreTypeError(f"{owner} has no option {unknown[0]!r}; its options: {listed}")
    missing = [
        name
        for name in known
        if parameters[name].default is inspect.Parameter.empty and name not in given
    ]
    if missing:
        raise GradcoreTypeError(
            f"{owner} needs the option{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
        )
    for key, value in given.items():
        if key in OPTION_RULES and not _is_default(parameters.get(key), value):
            OPTION_RULES[key](f"{key} (option of {owner})", value)


def _is_default(parameter: inspect.Parameter | None, value: Any) -> bool:
    """Whether ``value`` is the function's own documented default (``None`` for "native size", say).

    A shared rule may be stricter than one function's default (``size`` is a positive count for
    most data sets, ``None`` keeps CIFAR's native 32x32): passing the default explicitly is
    always allowed.
    """
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return False
    default = parameter.default
    return value is default or (
        type(value) is type(default)
        and isinstance(value, (bool, int, float, str))
        and value == default
    )
