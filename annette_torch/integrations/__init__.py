"""Adapters that let code written for other tools use annette_torch's estimator.

* :mod:`annette_torch.integrations.nn_meter`: nn-Meter's latency-predictor interface
  (``load_latency_predictor(...).predict(model, model_type, input_shape)`` in
  milliseconds), so code written for nn-Meter, such as NNI's hardware-aware NAS, switches
  with one import.

Nothing here is imported by ``import annette_torch``.
"""
