"""fastverify: NCCL tuning profiles, a supervisor daemon and an exporter for SGLang servers."""

__version__ = "0.1.0"
