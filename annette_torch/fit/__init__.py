"""The model generator: fit a profile (mapping rules, layer models, overhead) to a
measurement store. One module per step; :mod:`.generate` runs them in order."""
from .generate import MODEL_TYPES, fit_profile, format_report, store_ranges
from .mapping import learn_rules
from .table import StoreData, kernel_table, load_store

__all__ = ["MODEL_TYPES", "StoreData", "fit_profile", "format_report", "kernel_table", "learn_rules", "load_store", "store_ranges"]
