"""ag.nn: modules and parameters."""

from __future__ import annotations

from . import functional
from .modules import Linear, Module, Parameter, ReLU, Sequential, Tanh

__all__ = ["Linear", "Module", "Parameter", "ReLU", "Sequential", "Tanh", "functional"]
