"""Adapters that make gvx sandboxes the execution backend of agent harnesses.

Each adapter is a module of its own that needs its harness installed (an
extra of the gvx package); ``import gvx`` imports none of them.
"""
