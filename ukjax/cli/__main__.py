"""`python -m ukjax.cli`, as the `ukjax` command."""

from .main import main

main()
