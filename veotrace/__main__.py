"""Entry point for ``python -m veotrace``."""

from veotrace.cli import run

if __name__ == "__main__":
    run()
