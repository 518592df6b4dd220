"""The model generator: fit a profile (mapping rules, layer models, overhead) to a
measurement store. One module per step; :mod:`.generate` runs them in order."""
from .generate import MODEL_TYPES, FewBenchmarksWarning, fit_profile, format_report, store_kernels, store_ranges
from .mapping import learn_rules
from .prior import fit_prior_corrected, format_prior_report
from .table import StoreData, kernel_table, load_store

__all__ = ["MODEL_TYPES", "FewBenchmarksWarning", "StoreData", "fit_prior_corrected", "fit_profile", "format_prior_report", "format_report", "kernel_table", "learn_rules", "load_store", "store_kernels", "store_ranges"]
