"""`python -m gpuledger.cli ...`: the same program as the `gpuledger` script."""

from gpuledger.cli import main

main()
