"""Tests of the response store package (``chatfmt.store``), one module per store module."""
