"""Fusion rules: data that says which layer chains a target runs as one kernel.

A rule is (primary kind, secondary kind -> resulting kernel kind, optional condition).
The condition is a list of clauses on either layer's attributes or dimensions, e.g.
``{"layer": "secondary", "attr": "kernel_size", "op": "==", "value": 2}``. Clauses are
evaluated with a fixed set of comparison operators; nothing in a rule is executed.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

from ..graph.layer_graph import Layer

_OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge, "in": lambda a, b: a in b,
        "not in": lambda a, b: a not in b}


@dataclass(frozen=True)
class Clause:
    """``<layer>.<attr> <op> <value>``; tuple attributes compare element-wise with a
    scalar value (all elements must satisfy it)."""

    layer: str
    attr: str
    op: str
    value: Any

    def __post_init__(self) -> None:
        if self.layer not in ("primary", "secondary"):
            raise ValueError(f"clause layer must be 'primary' or 'secondary', got {self.layer!r}")
        if self.op not in _OPS:
            raise ValueError(f"clause op must be one of {sorted(_OPS)}, got {self.op!r}")
        if isinstance(self.value, list):  # JSON lists become tuples: rules stay hashable
            object.__setattr__(self, "value", tuple(self.value))

    def holds(self, primary: Layer, secondary: Layer) -> bool:
        layer = primary if self.layer == "primary" else secondary
        if self.attr in layer.attrs:
            actual = layer.attrs[self.attr]
        elif self.attr in layer.counts.dims:
            actual = layer.counts.dims[self.attr]
        else:
            return False
        compare, value = _OPS[self.op], self.value
        if isinstance(actual, (tuple, list)) and not isinstance(value, tuple) and self.op not in ("in", "not in"):
            return all(compare(a, value) for a in actual)
        return bool(compare(actual, value))

    def to_dict(self) -> dict:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"layer": self.layer, "attr": self.attr, "op": self.op, "value": value}


@dataclass(frozen=True)
class FusionRule:
    """Fuse a ``secondary`` layer into the kernel whose output is a ``primary`` layer."""

    primary: str
    secondary: str
    result: str
    condition: tuple[Clause, ...] = field(default_factory=tuple)

    def applies(self, primary: Layer, secondary: Layer) -> bool:
        return all(clause.holds(primary, secondary) for clause in self.condition)

    @classmethod
    def from_dict(cls, data: dict) -> FusionRule:
        return cls(primary=str(data["primary"]), secondary=str(data["secondary"]),
                   result=str(data.get("result", data["primary"])),
                   condition=tuple(Clause(**c) for c in data.get("condition") or ()))

    def to_dict(self) -> dict:
        data = {"primary": self.primary, "secondary": self.secondary, "result": self.result}
        if self.condition:
            data["condition"] = [c.to_dict() for c in self.condition]
        return data
