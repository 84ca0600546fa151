"""fastverify's NCCL tuner plugin support: the table format, the built plugin, profile
wiring, the derivation's helpers and the check that NCCL loaded it."""
