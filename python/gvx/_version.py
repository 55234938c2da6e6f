"""gvx's version: the one place it is set.

setup.py reads it for the wheel's metadata and stamps it into rungv and
libgvx (``-X main.version``), and the Makefile reads it too, so
``gvx.__version__``, ``gvx.library_version()`` and ``rungv --version``
agree. Keep it a single assignment of a string literal: those readers
parse this line, they do not import the package.
"""

__version__ = "0.1.0"
