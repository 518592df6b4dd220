"""Profiles for devices without a calibration campaign (PerfNetV2's unseen devices,
HELP/LitePred-style few-shot transfer).

    from annette_torch.transfer import (DeviceDescriptor, Sample, adapt_profile, local_sources,
                                        profile_from_descriptor)

    # few-shot: networks measured on the new device (traced graph, ms) correct an existing profile
    adapted = adapt_profile("openvino-cpu", [Sample(graph, measured_ms, set="mobile"), ...])
    Estimator(adapted)(model, input_shape=(1, 3, 224, 224))

    # zero-shot: a descriptor of the new device and profiles of described devices
    profile = profile_from_descriptor(DeviceDescriptor("openvino-cpu", "bf16", threads=1, peak_ops_s=1.7e11),
                                      local_sources(["openvino-cpu", "torch-cpu"]))

Both keep a source profile's layer models and store a per-kernel correction (and, few-shot,
the target's mapping: the source's fusion rules or none) in the profile's ``adaptation``
field (:mod:`annette_torch.layer_models.adapted`).
``annette-torch adapt`` measures the reference networks (:mod:`.references`) and writes
the adapted profile; ``benchmarks/transfer.py`` scores both ways leave-one-device-out.
"""
from .descriptor import LOCAL_DESCRIPTORS, DeviceDescriptor, local_sources, nearest_source, profile_from_descriptor
from .fewshot import (MAPPING_NAMES, MAPPINGS, FewSamplesWarning, Sample, SourceKernels, adapt_profile, backend_mapping,
                      choose_correction, choose_source, fit_adaptation, mapping_candidates, mapping_choices,
                      source_kernels)
from .references import Network, draw, reference_pool

__all__ = ["LOCAL_DESCRIPTORS", "MAPPING_NAMES", "MAPPINGS", "DeviceDescriptor", "FewSamplesWarning", "Network", "Sample", "SourceKernels",
           "adapt_profile", "backend_mapping", "choose_correction", "choose_source", "draw", "fit_adaptation",
           "local_sources", "mapping_candidates", "mapping_choices", "nearest_source", "profile_from_descriptor",
           "reference_pool", "source_kernels"]
