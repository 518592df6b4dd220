"""Neural-architecture-search integration.

* :class:`SignatureCache`: estimate identical kernels and blocks once (batched candidate
  estimation for a search space: thousands of candidates per second);
* :class:`LatencyLUT`, :class:`LatencyLoss`: lookup tables, expected latency under
  (Gumbel-)softmax architecture weights and the latency-penalised loss of FBNet and
  ProxylessNAS;
* :class:`WidthLatency`: latency differentiable in channel-width multipliers;
* :class:`MobileNetV2Space`: a MobileNetV2-style space (kernel, expansion, width, depth
  per stage) used by the search examples and benchmarks.
"""
from .cache import BlockCost, SignatureCache
from .lut import CachedWeights, LatencyLoss, LatencyLUT
from .mobilenetv2_space import InvertedResidual, MobileNetV2Space, StageChoice
from .nasbench201 import NB201Network, arch_string, parse_arch, sample_architectures
from .width import WidthLatency

__all__ = ["BlockCost", "CachedWeights", "InvertedResidual", "LatencyLUT", "LatencyLoss", "MobileNetV2Space",
           "NB201Network", "SignatureCache", "StageChoice", "WidthLatency", "arch_string", "parse_arch",
           "sample_architectures"]
