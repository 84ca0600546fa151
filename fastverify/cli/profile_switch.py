"""`fastverifyctl profile set|current`: switch through the daemon (placeholder until the daemon lands)."""
