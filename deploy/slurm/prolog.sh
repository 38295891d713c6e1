#!/bin/sh
# Slurm Prolog: records the GPUs the job is given (see gpuledger-holdings.sh). Always exits 0.
exec "$(dirname "$0")/gpuledger-holdings.sh" start
