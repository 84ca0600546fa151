"""This host's measurements in NVIDIA AIConfigurator's own database layout (a custom
system), and AIConfigurator's predictions on it beside fastverify's and the sim's."""
