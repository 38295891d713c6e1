#!/bin/sh
# Slurm Epilog: records that the job gave its GPUs back (see gpuledger-holdings.sh). Always exits 0.
exec "$(dirname "$0")/gpuledger-holdings.sh" end
