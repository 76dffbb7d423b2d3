"""Entry point for ``python -m veotrace``."""

from veotrace.cli import main

if __name__ == "__main__":
    main()
