"""gpuledger's own figures in Prometheus text format (`gpuledger metrics serve`)."""
