"""A workload from user code: ``MODULE:FUNCTION`` wherever a zoo name is accepted.

The contract (docs/contract.md, "Workloads"): ``FUNCTION()`` takes no arguments and
returns ``(model, make_batch, loss_fn)``:

- ``model``: a ``torch.nn.Module``;
- ``make_batch(batch_size)``: returns ``(inputs, targets)`` for one minibatch, ``inputs`` a
  tensor (or a tuple of tensors passed positionally) with the batch as its first dimension;
- ``loss_fn(outputs, targets)``: a scalar tensor, or ``None`` for an inference-only workload.

:func:`load_workload` imports the module *by name* and checks all of it on a batch of two
(one forward pass, the loss when there is one), so a bad entry fails at once with
``InvalidArgument(field="workload")`` naming the workload, never half-way through a
profiling run. ``allowed_path`` (an agent's ``--workload-path``) restricts where the module
may come from: a name outside those directories is refused, saying so; without it (the CLI)
the module is found on ``PYTHONPATH``. Code is never taken from a request's content.

The workload's id (:attr:`UserWorkload.workload_id`) is the one formula of
:func:`edgetune.base.workload.workload_id`: the entry's name and :func:`structure_hash`, a short
hash of the model's *structure* — module types and settings, parameter and buffer shapes, the
shape of one input sample — not of its weights or of anything in memory: the same code
gives the same id in every process and on every node, so measurements, models and jobs
recorded under it match up, and a changed architecture gets a new id (its old measurements
no longer describe it).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgetune.base.workload import (
    HASH_CHARS,
    SPEC_ALLOWED,
    WORKLOAD_PATH_ENV,
    id_name,
    parse_spec,
    workload_id,
)
from edgetune.errors import InvalidArgument

__all__ = ["UserWorkload", "load_workload", "loaded_workload", "structure_hash"]

FIELD = "workload"
#: Batch size of the checking forward pass.
CHECK_BATCH = 2
#: User workloads a process keeps loaded (an agent serving many jobs stays bounded).
MAX_LOADED = 64

Batch = tuple[Any, Any]


@dataclass(frozen=True)
class UserWorkload:
    """A checked workload from user code (see the module docs for the contract)."""

    spec: str  # MODULE:FUNCTION as given
    workload_id: str  # NAME-HASH (base.workload.workload_id): what measurements, models and jobs refer to
    model: nn.Module
    make_batch: Callable[[int], Batch]
    loss_fn: Callable[[Any, Any], torch.Tensor] | None

    @property
    def name(self) -> str:
        """The id without its hash: ``module.function`` (the module's last component)."""
        return id_name(self.spec)

    @property
    def trainable(self) -> bool:
        """Whether the workload can be profiled in the ``train`` role (it has a loss)."""
        return self.loss_fn is not None

    def roles(self) -> tuple[str, ...]:
        return ("train", "infer") if self.trainable else ("infer",)

    def forward(self, inputs: Any) -> Any:
        """``model(inputs)``, or ``model(*inputs)`` for a tuple of inputs."""
        return call_model(self.model, inputs)


def call_model(model: nn.Module, inputs: Any) -> Any:
    """The contract's call: ``model(*inputs)`` for a tuple (or list) of inputs, else ``model(inputs)``."""
    return model(*inputs) if isinstance(inputs, (tuple, list)) else model(inputs)


# --------------------------------------------------------------------------- importing


_IMPORT_LOCK = threading.Lock()


def _within(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _import(spec: str, module_name: str, allowed_path: Sequence[Path] | None, field: str = FIELD,
            allowed: str = SPEC_ALLOWED) -> Any:
    """The module, imported by name; with ``allowed_path``, only from those directories."""
    if allowed_path is None:
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            raise InvalidArgument(field, f"{spec}: no module named {exc.name!r} on PYTHONPATH", allowed) from None
        except Exception as exc:  # the user's module raised while importing
            raise InvalidArgument(field, f"{spec}: importing {module_name} failed: {type(exc).__name__}: {exc}",
                                  allowed) from None
    roots = [Path(p).resolve() for p in allowed_path]
    allowed_text = ", ".join(str(r) for r in roots) or "(none: this agent loads no user workloads)"
    refused = f"{spec}: module {module_name!r} is not in this agent's workload path ({allowed_text})"
    top = module_name.split(".", 1)[0]
    found = importlib.machinery.PathFinder.find_spec(top, [str(r) for r in roots]) if roots else None
    if found is None:
        raise InvalidArgument(field, refused, "a module under --workload-path / " + WORKLOAD_PATH_ENV)
    with _IMPORT_LOCK:
        # The search path grows only while this import runs; a module of the same name that is
        # already loaded from elsewhere is caught below by its file.
        saved = list(sys.path)
        sys.path[:0] = [str(r) for r in roots]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            raise InvalidArgument(field, f"{spec}: no module named {exc.name!r} in {allowed_text}",
                                  allowed) from None
        except Exception as exc:
            raise InvalidArgument(field, f"{spec}: importing {module_name} failed: {type(exc).__name__}: {exc}",
                                  allowed) from None
        finally:
            sys.path[:] = saved
    file = getattr(module, "__file__", None)
    if file is None or not _within(Path(file).resolve(), roots):
        raise InvalidArgument(field, refused, "a module under --workload-path / " + WORKLOAD_PATH_ENV)
    return module


# --------------------------------------------------------------------------- checking


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in _tensors(o)]
    return []


def check_batch(spec: str, batch: object, batch_size: int) -> Batch:
    """``make_batch(batch_size)``'s result as ``(inputs, targets)``, or ``InvalidArgument`` naming ``spec``."""
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise InvalidArgument(FIELD, f"{spec}: make_batch({batch_size}) returned {type(batch).__name__}, "
                                     "not (inputs, targets)", SPEC_ALLOWED)
    inputs, targets = batch
    if isinstance(inputs, list):
        inputs = tuple(inputs)
    tensors = _tensors(inputs)
    if not tensors or (isinstance(inputs, tuple) and len(tensors) != len(inputs)):
        raise InvalidArgument(FIELD, f"{spec}: make_batch({batch_size}) inputs are {type(inputs).__name__}, "
                                     "not a tensor or a tuple of tensors", SPEC_ALLOWED)
    for t in tensors:
        if t.dim() == 0 or t.shape[0] != batch_size:
            raise InvalidArgument(FIELD, f"{spec}: make_batch({batch_size}) gave inputs of shape {tuple(t.shape)}: "
                                         f"the first dimension must be the batch ({batch_size})", SPEC_ALLOWED)
    return inputs, targets


def _check(spec: str, model: nn.Module, make_batch: Callable[[int], Batch],
           loss_fn: Callable[[Any, Any], torch.Tensor] | None) -> Batch:
    """One batch of :data:`CHECK_BATCH` through ``model`` (and ``loss_fn``); returns the batch."""
    try:
        batch = make_batch(CHECK_BATCH)
    except Exception as exc:
        raise InvalidArgument(FIELD, f"{spec}: make_batch({CHECK_BATCH}) raised {type(exc).__name__}: {exc}",
                              SPEC_ALLOWED) from None
    inputs, targets = check_batch(spec, batch, CHECK_BATCH)
    was_training = model.training
    try:
        with torch.no_grad():
            outputs = call_model(model, inputs)
            if loss_fn is not None:
                loss = loss_fn(outputs, targets)
                if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                    raise InvalidArgument(FIELD, f"{spec}: loss_fn returned {type(loss).__name__} "
                                                 f"{tuple(loss.shape) if isinstance(loss, torch.Tensor) else ''}, "
                                                 "not a scalar tensor", SPEC_ALLOWED)
    except InvalidArgument:
        raise
    except Exception as exc:
        raise InvalidArgument(FIELD, f"{spec}: the model's forward pass (or its loss) raised "
                                     f"{type(exc).__name__}: {exc}", SPEC_ALLOWED) from None
    finally:
        model.train(was_training)
    return inputs, targets


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def structure_hash(model: nn.Module, sample_inputs: Any = None) -> str:
    """Short hash of ``model``'s structure (and its input sample shapes), independent of weights.

    Covers each module's qualified name, type and settings (``extra_repr``: channels, kernel
    sizes, ...; the class by its qualified name, not its module path: the same file imported
    under two package paths is one structure), each parameter's and buffer's shape and dtype, and the shape and dtype of one
    input sample without its batch dimension. Memory addresses in a custom ``extra_repr`` are
    blanked so that two processes agree.
    """
    h = hashlib.sha256()
    for name, m in model.named_modules():
        h.update(f"M|{name}|{type(m).__qualname__}|{_ADDRESS.sub('0x', m.extra_repr())}\n".encode())
    for name, p in model.named_parameters():
        h.update(f"P|{name}|{tuple(p.shape)}|{p.dtype}\n".encode())
    for name, b in model.named_buffers():
        h.update(f"B|{name}|{tuple(b.shape)}|{b.dtype}\n".encode())
    for t in _tensors(sample_inputs):
        h.update(f"I|{tuple(t.shape[1:])}|{t.dtype}\n".encode())
    return h.hexdigest()[:HASH_CHARS]


# --------------------------------------------------------------------------- loading


def call_entry(spec: str, allowed_path: Sequence[Path] | None = None, *, field: str = FIELD,
               allowed: str = SPEC_ALLOWED) -> Any:
    """What ``FUNCTION()`` of ``MODULE:FUNCTION`` returns: the module imported by name (with
    ``allowed_path``, only from those directories), the function called with no arguments. Every
    failure is ``InvalidArgument(field)`` whose message starts with ``spec``."""
    try:
        module_name, function = parse_spec(spec)
    except InvalidArgument as exc:
        raise InvalidArgument(field, exc.message, allowed) from None
    module = _import(spec, module_name, allowed_path, field, allowed)
    fn = getattr(module, function, None)
    if fn is None:
        raise InvalidArgument(field, f"{spec}: module {module_name} has no function {function!r}", allowed)
    if not callable(fn):
        raise InvalidArgument(field, f"{spec}: {function} is a {type(fn).__name__}, not a function", allowed)
    try:
        return fn()
    except Exception as exc:
        raise InvalidArgument(field, f"{spec}: {function}() raised {type(exc).__name__}: {exc}", allowed) from None


_LOADED: OrderedDict[str, UserWorkload] = OrderedDict()
_LOADED_LOCK = threading.Lock()


def load_workload(spec: str, allowed_path: Sequence[Path] | None = None) -> UserWorkload:
    """Import ``MODULE:FUNCTION``, call it, check what it returns and give the workload its id.

    ``allowed_path``: directories the module must come from (an agent's operator setting);
    ``None`` imports from ``sys.path`` (the CLI: ``PYTHONPATH``). Every failure is an
    ``InvalidArgument(field="workload")`` whose message starts with ``spec``.
    """
    function = parse_spec(spec)[1]
    result = call_entry(spec, allowed_path)
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        got = f"a {len(result)}-tuple" if isinstance(result, (tuple, list)) else type(result).__name__
        raise InvalidArgument(FIELD, f"{spec}: {function}() returned {got}, not (model, make_batch, loss_fn)",
                              SPEC_ALLOWED)
    model, make_batch, loss_fn = result
    if not isinstance(model, nn.Module):
        raise InvalidArgument(FIELD, f"{spec}: the model is a {type(model).__name__}, not a torch.nn.Module",
                              SPEC_ALLOWED)
    if not callable(make_batch):
        raise InvalidArgument(FIELD, f"{spec}: make_batch is a {type(make_batch).__name__}, not callable",
                              SPEC_ALLOWED)
    if loss_fn is not None and not callable(loss_fn):
        raise InvalidArgument(FIELD, f"{spec}: loss_fn is a {type(loss_fn).__name__}, neither callable nor None",
                              SPEC_ALLOWED)
    inputs, _ = _check(spec, model, make_batch, loss_fn)
    wid = workload_id(spec, structure_hash(model, inputs))
    wl = UserWorkload(spec=spec, workload_id=wid, model=model, make_batch=make_batch, loss_fn=loss_fn)
    with _LOADED_LOCK:
        _LOADED[wid] = wl
        _LOADED.move_to_end(wid)
        while len(_LOADED) > MAX_LOADED:
            _LOADED.popitem(last=False)
    return wl


def loaded_workload(workload_id: str) -> UserWorkload | None:
    """The user workload this process loaded under ``workload_id`` (a real device's runner needs it)."""
    with _LOADED_LOCK:
        return _LOADED.get(workload_id)
