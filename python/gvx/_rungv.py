"""The ``rungv`` console script: runs the rungv binary the wheel carries.

It replaces itself with the binary (exec, not a child process), so rungv
gets the terminal, the signals sent to this process and its own exit
status, exactly as if it had been run directly.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def main() -> NoReturn:
    # Imported here, not at module level: the package's import is the cost
    # this script pays before exec, and only the path is needed.
    from ._paths import rungv_path

    path = str(rungv_path())
    try:
        os.execv(path, ["rungv", *sys.argv[1:]])
    except OSError as e:
        sys.exit(f"rungv: cannot run {path}: {e.strerror}; reinstall gvx (pip install --force-reinstall gvx) or set GVX_RUNGV")


if __name__ == "__main__":
    main()
