"""`python -m gpuchain` is the `gpuchain` command."""

from gpuchain.entry import main

main()
