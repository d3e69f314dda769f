"""Kept only for report/cells.py's import of ``is_kernel_row`` (now mpiatlas.tidy.is_kernel_row)."""

from mpiatlas.tidy import is_kernel_row

__all__ = ["is_kernel_row"]
