"""Moved to fastverify.traces; kept for the modules still importing it here."""

from fastverify.traces import TraceError, analyze_path

__all__ = ["TraceError", "analyze_path"]
