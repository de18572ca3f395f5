"""``python -m queuelog``: the ``queuelog`` command, for an environment whose scripts
are not on the PATH."""

from queuelog.cli import main

if __name__ == "__main__":
    main(prog_name="queuelog")
