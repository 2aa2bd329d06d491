"""A mypy plugin for PySide6's constructor keywords (loaded by ``[tool.mypy] plugins`` in pyproject.toml).

PySide6 accepts every Qt property and every signal of a class *and of its bases* as a keyword argument of the
constructor: ``QPushButton("Go", objectName="go", toolTip="...", clicked=slot)`` sets the properties and connects the
signals. PySide6's own stubs list only the class's own properties (``objectName`` is QObject's, so
``QPushButton(objectName=...)`` is "an unexpected keyword") and no signals at all, so mypy refuses a call the library
documents. This plugin adds the missing keywords to each constructor signature of a PySide6 class, with their types:

- a property keyword that a base class's ``__init__`` declares (keyword-only) gets that declaration's type
  (``objectName: str | None``, ``maximumWidth: int | None``), so a wrong value is still an error;
- a signal of the class or of a base (an attribute typed ``Signal``) gets ``Callable[..., object]`` (the slot).

A keyword no class in the MRO declares stays an error. Calls through ``super().__init__(...)`` are not seen by
mypy's signature hooks; our code passes those keywords to the base constructor by name where the stubs list them,
or sets them after the call.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.nodes import (
    ARG_NAMED,
    ARG_NAMED_OPT,
    ARG_STAR,
    ARG_STAR2,
    FuncBase,
    OverloadedFuncDef,
    TypeInfo,
    Var,
)
from mypy.plugin import FunctionSigContext, Plugin
from mypy.types import (
    AnyType,
    CallableType,
    FunctionLike,
    Instance,
    Overloaded,
    ProperType,
    Type,
    TypeOfAny,
    get_proper_type,
)

_SIGNAL = "PySide6.QtCore.Signal"


def _keyword_only(sig: ProperType | None) -> list[tuple[str, Type]]:
    """The keyword-only parameters (name, type) of a constructor signature, over all of its overloads."""
    if isinstance(sig, Overloaded):
        items: list[CallableType] = list(sig.items)
    elif isinstance(sig, CallableType):
        items = [sig]
    else:
        return []
    out: list[tuple[str, Type]] = []
    for item in items:
        for name, kind, typ in zip(item.arg_names, item.arg_kinds, item.arg_types, strict=True):
            if name is not None and kind in (ARG_NAMED, ARG_NAMED_OPT):
                out.append((name, typ))
    return out


def _init_type(info: TypeInfo) -> ProperType | None:
    node = info.names.get("__init__")
    if node is None:
        return None
    init = node.node
    if isinstance(init, (FuncBase, OverloadedFuncDef)) and init.type is not None:
        return get_proper_type(init.type)
    return None


def _is_signal(node: object) -> bool:
    if not isinstance(node, Var) or node.type is None:
        return False
    typ = get_proper_type(node.type)
    return isinstance(typ, Instance) and typ.type.fullname == _SIGNAL


def inherited_keywords(info: TypeInfo, slot: Type) -> dict[str, Type]:
    """Every keyword PySide6 accepts for constructing ``info``: the properties and signals over its MRO."""
    found: dict[str, Type] = {}
    for base in info.mro:
        if not base.fullname.startswith("PySide6.") and base is not info:
            # a class of ours in the MRO: its own __init__ is what gets called; only PySide6 classes add keywords
            continue
        for name, typ in _keyword_only(_init_type(base)):
            found.setdefault(name, typ)
        for name, sym in base.names.items():
            if _is_signal(sym.node):
                found.setdefault(name, slot)
    return found


def _extend(item: CallableType, extra: dict[str, Type]) -> CallableType:
    if ARG_STAR2 in item.arg_kinds:
        return item
    have = {name for name in item.arg_names if name is not None}
    add = [(name, typ) for name, typ in extra.items() if name not in have]
    if not add:
        return item
    return item.copy_modified(
        arg_types=[*item.arg_types, *(typ for _, typ in add)],
        arg_kinds=[*item.arg_kinds, *(ARG_NAMED_OPT for _ in add)],
        arg_names=[*item.arg_names, *(name for name, _ in add)],
    )


class PySide6Plugin(Plugin):
    def get_function_signature_hook(self, fullname: str) -> Callable[[FunctionSigContext], FunctionLike] | None:
        if not fullname.startswith("PySide6."):
            return None
        sym = self.lookup_fully_qualified(fullname)
        if sym is None or not isinstance(sym.node, TypeInfo):
            return None
        return _constructor_signature

    # no other hooks: everything else is the stubs' own typing


def _constructor_signature(ctx: FunctionSigContext) -> FunctionLike:
    sig = ctx.default_signature
    ret = get_proper_type(sig.ret_type)
    if not isinstance(ret, Instance):
        return sig
    # a slot: any callable; its return value is ignored by Qt
    slot = CallableType(
        [AnyType(TypeOfAny.explicit), AnyType(TypeOfAny.explicit)],
        [ARG_STAR, ARG_STAR2],
        [None, None],
        ctx.api.named_generic_type("builtins.object", []),
        ctx.api.named_generic_type("builtins.function", []),
    )
    return _extend(sig, inherited_keywords(ret.type, slot))


def plugin(version: str) -> type[Plugin]:
    """mypy's entry point."""
    return PySide6Plugin
