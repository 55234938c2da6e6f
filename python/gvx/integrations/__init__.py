"""Adapters from gvx to other harnesses. Each submodule needs its harness's extra
and is imported on its own (``import gvx`` imports none of them)."""
