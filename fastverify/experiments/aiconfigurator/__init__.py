"""This host's measurements in NVIDIA AIConfigurator's own database layout (a custom
system, `fastverifyctl aiconfigurator export`); AIConfigurator's predictions on it are
compared by benchmarks/aiconfigurator_compare.py."""
