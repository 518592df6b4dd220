"""Fusion rules: data that says which layer chains a target runs as one kernel.

A rule is (primary kind, secondary kind -> resulting kernel kind, optional condition).
The condition is a list of clauses on either layer's attributes or dimensions, e.g.
``{"layer": "secondary", "attr": "kernel_size", "op": "==", "value": 2}``, or on where
the layer sits: ``returned`` (the network returns its result) and ``reads_input`` (it
reads the network's input). ONNX Runtime fuses a hard swish into its NCHWc conv except
at the network's output, and a residual add except where its other operand is the
network's plain-layout input. Clauses are evaluated with a
fixed set of comparison operators (``multiple of``: a blocked layout's channel
condition, ``c multiple of 4``); nothing in a rule is executed.
"""
from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass, field
from typing import Any

from ..graph.layer_graph import Layer

_OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge, "in": lambda a, b: a in b,
        "not in": lambda a, b: a not in b,
        "multiple of": lambda a, b: a % b == 0, "not multiple of": lambda a, b: a % b != 0}
#: the pseudo-attributes a clause reads as "the network returns this layer's result" and
#: "this layer reads the network's input"
RETURNED = "returned"
READS_INPUT = "reads_input"


@dataclass(frozen=True)
class Clause:
    """``<layer>.<attr> <op> <value>``; tuple attributes compare element-wise with a
    scalar value (all elements must satisfy it)."""

    layer: str
    attr: str
    op: str
    value: Any

    def __post_init__(self) -> None:
        """Validate: ``in``/``not in`` take a list, the orderings a number, ``==``/``!=``
        a number, string, bool or a list of them."""
        if self.layer not in ("primary", "secondary"):
            raise ValueError(f"clause layer must be 'primary' or 'secondary', got {self.layer!r}")
        if not isinstance(self.attr, str):
            raise ValueError(f"clause attr must be a string, got {self.attr!r}")
        if not isinstance(self.op, str) or self.op not in _OPS:
            raise ValueError(f"clause op must be one of {sorted(_OPS)}, got {self.op!r}")
        value = tuple(self.value) if isinstance(self.value, (list, tuple)) else self.value
        scalars = value if isinstance(value, tuple) else (value,)
        if not all(isinstance(v, (int, float, str)) and not (isinstance(v, float) and not math.isfinite(v))
                   for v in scalars):
            raise ValueError(f"clause value must be finite numbers, strings or booleans, got {self.value!r}")
        if self.op in ("in", "not in") and not isinstance(value, tuple):
            raise ValueError(f"clause op {self.op!r} needs a list value, got {self.value!r}")
        if self.op in ("<", "<=", ">", ">=") and (isinstance(value, (tuple, str, bool))):
            raise ValueError(f"clause op {self.op!r} needs a number value, got {self.value!r}")
        if self.op.endswith("multiple of") and not (_is_integer(value) and value > 0):
            raise ValueError(f"clause op {self.op!r} needs a positive integer value, got {self.value!r}")
        object.__setattr__(self, "value", value)    # JSON lists become tuples: rules stay hashable

    def holds(self, primary: Layer, secondary: Layer, returned: frozenset[str] = frozenset()) -> bool:
        """Whether the clause holds for this pair; ``returned`` names the layers whose
        results the network returns (:data:`RETURNED`; :data:`READS_INPUT` is the layer's own)."""
        layer = primary if self.layer == "primary" else secondary
        if self.attr == RETURNED:
            actual = layer.name in returned
        elif self.attr == READS_INPUT:
            actual = layer.reads_input
        elif self.attr in layer.attrs:
            actual = layer.attrs[self.attr]
        elif self.attr in layer.counts.dims:
            actual = layer.counts.dims[self.attr]
        else:
            return False
        compare, value = _OPS[self.op], self.value
        if self.op.endswith("multiple of") and not all(_is_integer(a) for a in _elements(actual)):
            return False           # a text ("same" padding) or fractional value is no multiple of anything
        try:
            if isinstance(actual, (tuple, list)) and not isinstance(value, tuple) and self.op not in ("in", "not in"):
                return all(compare(a, value) for a in actual)
            return bool(compare(actual, value))
        except TypeError:       # an ordering of a text attribute ("same" padding) against a number
            return False

    def to_dict(self) -> dict:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"layer": self.layer, "attr": self.attr, "op": self.op, "value": value}


def _elements(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _is_integer(value: Any) -> bool:
    """An integer (a Python or NumPy one), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class FusionRule:
    """Fuse a ``secondary`` layer into the kernel whose output is a ``primary`` layer."""

    primary: str
    secondary: str
    result: str
    condition: tuple[Clause, ...] = field(default_factory=tuple)

    def applies(self, primary: Layer, secondary: Layer, returned: frozenset[str] = frozenset()) -> bool:
        """Whether ``secondary`` fuses into ``primary``'s kernel; ``returned``: as :meth:`Clause.holds`."""
        return all(clause.holds(primary, secondary, returned) for clause in self.condition)

    @classmethod
    def from_dict(cls, data: dict) -> FusionRule:
        """Validate and build; ``ValueError``/``TypeError``/``KeyError`` say what is wrong."""
        if not isinstance(data, dict) or "primary" not in data or "secondary" not in data:
            raise ValueError(f"expected an object with 'primary' and 'secondary', got {data!r}")
        kinds = {"primary": data["primary"], "secondary": data["secondary"],
                 "result": data.get("result", data["primary"])}
        bad = [key for key, value in kinds.items() if not isinstance(value, str)]
        if bad:
            raise ValueError(f"'{bad[0]}' must be a layer kind name, got {kinds[bad[0]]!r}")
        condition = data.get("condition") or []
        if not isinstance(condition, list) or not all(isinstance(c, dict) for c in condition):
            raise ValueError(f"'condition' must be a list of clause objects, got {condition!r}")
        return cls(**kinds, condition=tuple(Clause(**c) for c in condition))

    def to_dict(self) -> dict:
        data = {"primary": self.primary, "secondary": self.secondary, "result": self.result}
        if self.condition:
            data["condition"] = [c.to_dict() for c in self.condition]
        return data
