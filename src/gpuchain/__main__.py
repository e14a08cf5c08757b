"""`python -m gpuchain` is the `gpuchain` command."""

from gpuchain.cli import main

main()
